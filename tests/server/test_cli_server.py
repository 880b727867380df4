"""The CLI through `fleet serve`: the same documents and exit codes as local mode."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.server.conftest import ServeLab, ServeLabFactory
from tests.server.test_serve import _seed_tasks

LOCAL = {"FLEET_SERVER": "local"}


async def _both(lab: ServeLab, *args: str) -> tuple[Any, Any]:
    """`fleet --json ARGS` locally and through the lab's server (selected by the default
    socket, as a user would have it): both must succeed."""
    local = await lab.run("--json", *args, env=LOCAL)
    remote = await lab.run("--json", *args)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    return local.json(), remote.json()


async def test_read_commands_answer_the_same_through_the_server(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    await _seed_tasks(lab)
    recorded_since = str(int(time.time()) - 3600)
    recorded_until = str(int(time.time()) + 1)  # the lab's first `fleet status` is before
    await asyncio.sleep(1.1)  # the server's monitor records only after this second
    server = await lab.serve()
    drained = await lab.run("drain", "gpu2", "--reason", "fan", env=LOCAL)
    assert drained.returncode == 0, drained.stderr
    whoami = await lab.run("--server", str(server.socket_path), "tasks")  # explicit --server
    assert whoami.returncode == 0, whoami.stderr

    for args in (("tasks", "--all"), ("tasks", "--state", "queued"), ("tasks", "1", "2"),
                 ("allocations", "--all"),
                 ("events", "--kind", "host_drained"), ("hosts",), ("hosts", "--hosts", "gpu2"),
                 ("history", "gpus", "--since", recorded_since, "--until", recorded_until),
                 ("history", "hosts", "--since", recorded_since, "--until", recorded_until)):
        local, remote = await _both(lab, *args)
        if args[0] == "hosts":  # last_seen moves while the server's monitor runs
            for row in (*local["hosts"], *remote["hosts"]):
                row.pop("last_seen")
        if args[0] == "events":  # the default window ends at each command's own "now"
            for doc in (local, remote):
                doc.pop("since"), doc.pop("until")
        if args[0] == "history":  # the samples the lab's `fleet status` recorded
            assert len(local["points"]) == (3 if args[1] == "gpus" else 2), local
        assert local == remote, args

    # Through the server the history is the server's database, not the one --db names.
    for kind, points in (("gpus", 3), ("hosts", 2)):
        elsewhere = await lab.run("--json", "--db", str(lab.cli.home / "other.db"), "history",
                                  kind, "--since", recorded_since, "--until", recorded_until)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert len(elsewhere.json()["points"]) == points, kind

    local, remote = await _both(lab, "status")
    for doc in (local, remote):
        assert [(h["name"], h["state"], len(h["gpus"])) for h in doc["hosts"]] == \
            [("gpu1", "up", 2), ("gpu2", "up", 1)]
    assert [g["uuid"] for h in local["hosts"] for g in h["gpus"]] == \
        [g["uuid"] for h in remote["hosts"] for g in h["gpus"]]

    for args, code in ((("status", "--hosts", "nope"), 2), (("cancel", "999"), 2),
                       (("tasks", "999"), 2),
                       (("release", "999"), 2), (("drain", "nohost"), 2)):
        local_run = await lab.run(*args, env=LOCAL)
        remote_run = await lab.run(*args)
        assert (local_run.returncode, remote_run.returncode) == (code, code), args
        assert remote_run.stderr.startswith("fleet: error: "), remote_run.stderr
        assert local_run.stderr.splitlines()[0] == remote_run.stderr.splitlines()[0], args


async def test_actions_through_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2)
    await lab.serve()
    held = await lab.run("--json", "reserve", "--gpus", "1", "--note", "debug",
                         env={"FLEET_OWNER": "mallory"})
    assert held.returncode == 0, held.stderr
    claim = json.loads(held.stdout)
    assert claim["owner"] != "mallory"  # through the server the owner is the Unix user
    (allocation,) = claim["allocation_ids"]
    listed = json.loads((await lab.run("--json", "allocations")).stdout)["allocations"]
    assert [row["id"] for row in listed] == [allocation]
    drained = await lab.run("--json", "drain", "gpu1", "--reason", "fan")
    assert drained.returncode == 0 and json.loads(drained.stdout)["changed"] is True
    again = await lab.run("drain", "gpu1", "--reason", "fan")
    assert "was already drained" in again.stdout
    assert (await lab.run("undrain", "gpu1")).returncode == 0
    released = await lab.run("--json", "release", str(allocation))
    assert released.returncode == 0 and json.loads(released.stdout) == {"released": [allocation]}
    assert json.loads((await lab.run("--json", "allocations")).stdout)["allocations"] == []


async def test_a_named_server_that_does_not_answer_exits_9(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    missing = lab.run_dir / "nobody" / "fleet.sock"
    result = await lab.run("--server", str(missing), "tasks")
    assert result.returncode == 9
    assert f"cannot reach fleet serve at {missing}" in result.stderr
    local = await lab.run("tasks")  # nothing on the default socket: local mode, silently
    assert local.returncode == 0 and local.stderr == ""


async def test_status_of_a_managed_host_the_server_does_not_watch_is_refused(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1, 1)
    await lab.serve("--hosts", "gpu1")
    watched = await lab.run("--json", "status", "--hosts", "gpu1")
    assert watched.returncode == 0, watched.stderr
    assert [host["name"] for host in watched.json()["hosts"]] == ["gpu1"]
    for pattern in ("gpu2", "gpu*"):  # it used to answer "0/0 hosts up" (or gpu1 alone), exit 0
        left_out = await lab.run("status", "--hosts", pattern)
        assert left_out.returncode == 2, (pattern, left_out.stdout, left_out.stderr)
        assert "gpu2 is managed but not watched by this fleet serve" in left_out.stderr

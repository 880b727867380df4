"""A controller pair on one PostgreSQL database: the standby answers reads and dispatches,
takes over within 10 s when the leader is killed, cut off or frozen, and a thawed leader
writes nothing (needs the suite's PostgreSQL server)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from fleet.client.remote import open_remote
from fleet.errors import FleetError
from tests.server.conftest import ServeLab, ServeLabFactory, ServerProcess, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.postgresql_only]

TAKEOVER_BOUND_S = 10.0
TASKS = 16
# Appends its task id to argv[2] (so a second run of one task shows), then says where it ran.
STAMP = """\
import json, os, sys, time
start = time.time()
with open(sys.argv[2], "a") as runs:
    runs.write(os.environ["FLEET_TASK_ID"] + "\\n")
time.sleep(float(sys.argv[1]))
print(json.dumps({"gpu": os.environ["CUDA_VISIBLE_DEVICES"], "start": start,
                  "end": time.time(), "task": int(os.environ["FLEET_TASK_ID"])}))
"""


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """The test's database, read directly."""
    found = create_engine(db_url)
    yield found
    found.dispose()


async def role_of(server: ServerProcess) -> str | None:
    """What the server says it is (None: not answering yet)."""
    try:
        async with open_remote(server.socket_path) as remote:
            return (await remote.whoami()).role
    except FleetError:
        return None


async def until_role(server: ServerProcess, role: str, bound_s: float,
                     engine: Engine | None = None) -> float:
    """Seconds until `server` says it is `role` (AssertionError after `bound_s`, with what it
    printed and, given the `engine`, the database's sessions)."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        assert server.process.returncode is None, await server.stderr()
        if await role_of(server) == role:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    sessions = "" if engine is None else "\nsessions:\n" + "\n".join(database_sessions(engine))
    raise AssertionError(f"pid {server.pid} is not the {role} after {bound_s}s; it printed:\n"
                         f"{await server.stderr_so_far()}{sessions}")


def database_sessions(engine: Engine) -> list[str]:
    """Each other session on the test's database: who, its state, what it waits for, for how
    long, and its statement."""
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT application_name, state, wait_event_type, wait_event, "
            "round(extract(epoch FROM now() - xact_start)::numeric, 1) AS in_transaction_s, "
            "round(extract(epoch FROM now() - state_change)::numeric, 1) AS in_state_s, "
            "left(query, 100) AS query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()")).all()
    return [" | ".join(str(value) for value in row) for row in rows]


async def start_pair(lab: ServeLab) -> tuple[ServerProcess, ServerProcess]:
    """The leader on the lab's socket, then the standby on its own."""
    leader = await lab.serve()
    path = lab.run_dir / "standby" / "fleet.sock"
    standby = ServerProcess(await lab.spawn_server("--socket", str(path)), path)
    lab.servers.append(standby)
    await until_role(standby, "standby", 30.0)
    return leader, standby


async def exits_with(server: ServerProcess, bound_s: float) -> tuple[int, str]:
    """The exit code and stderr of a server that is expected to stop on its own."""
    code = await asyncio.wait_for(server.process.wait(), bound_s)
    return code, await server.stderr()


def leader_session(engine: Engine, pid: int) -> int:
    """The backend pid of the leader's lock session."""
    with engine.connect() as connection:
        return int(connection.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
            {"name": f"fleet serve pid {pid} on {socket.gethostname()}"}).scalar_one())


def duplicate_samples(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text(
            "SELECT count(*) FROM (SELECT gpu_id, ts FROM gpu_samples GROUP BY gpu_id, ts "
            "HAVING count(*) > 1) AS twice")).scalar_one())


def samples_before(engine: Engine, ts_ms: int) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM gpu_samples WHERE ts < :ts"),
                                      {"ts": ts_ms}).scalar_one())


def leadership(engine: Engine) -> tuple[int, float]:
    with engine.connect() as connection:
        row = connection.execute(text(
            "SELECT epoch, since_s FROM fleet_leadership WHERE id = 1")).one()
    return int(row.epoch), float(row.since_s)


async def test_standby_answers_reads_and_leads_once_the_leaders_session_is_cut(
        serve_lab: ServeLabFactory, engine: Engine) -> None:
    lab = await serve_lab(2, 1)
    leader, standby = await start_pair(lab)
    async with open_remote(standby.socket_path) as remote:
        with pytest.raises(FleetError, match=f"standby \\(leader: pid {leader.pid} on"):
            await remote.live_snapshot()
        assert len(await remote.tasks()) == 0  # database reads work on the standby
    shown = await lab.run("--json", "serve", "--status")
    assert shown.returncode == 0, shown.stderr
    controllers = json.loads(shown.stdout)["controllers"]
    assert [(c["role"], c["pid"]) for c in controllers] == [("leader", leader.pid),
                                                           ("standby", standby.pid)]
    epoch, _ = leadership(engine)
    assert controllers[0]["epoch"] == epoch

    with engine.connect() as connection:  # as a lost link or a database restart would
        connection.execute(text("SELECT pg_terminate_backend(:pid)"),
                           {"pid": leader_session(engine, leader.pid)})
    cut = time.monotonic()
    code, stderr = await exits_with(leader, TAKEOVER_BOUND_S)
    assert code == 4 and "lost the leadership" in stderr, stderr
    await until_role(standby, "leader", TAKEOVER_BOUND_S - (time.monotonic() - cut),
                     engine)
    await wait_ready(standby)
    assert leadership(engine)[0] == epoch + 1
    shown = await lab.run("serve", "--status")
    assert shown.returncode == 0 and f"leader   pid {standby.pid} on" in shown.stdout
    assert f"epoch {epoch + 1}" in shown.stdout


async def test_leader_killed_during_sixteen_waiting_dispatches_through_the_standby(
        serve_lab: ServeLabFactory, engine: Engine, tmp_path: Path) -> None:
    lab = await serve_lab(4, 4)
    leader, standby = await start_pair(lab)
    script = tmp_path / "stamp.py"
    script.write_text(STAMP)
    runs = tmp_path / "runs.txt"
    clients = [asyncio.create_task(lab.run(
        "--server", str(standby.socket_path), "dispatch", "--wait", "--queue-timeout", "2m",
        str(script), "1.5", str(runs))) for _ in range(TASKS)]
    deadline = time.monotonic() + 60
    while not (runs.exists() and len(runs.read_text().split()) >= 4):  # some run, more wait
        assert time.monotonic() < deadline, "no task started within 60 s"
        await asyncio.sleep(0.05)
    assert await leader.stop(signal.SIGKILL) == -signal.SIGKILL
    killed_at = time.time()
    took = await until_role(standby, "leader", TAKEOVER_BOUND_S, engine)

    results = await asyncio.gather(*clients)
    stamps = []
    for result in results:
        assert result.returncode == 0, result.stderr
        stamps.append(json.loads(result.stdout.splitlines()[-1]))
    ran = Counter(runs.read_text().split())
    assert sorted(ran.values()) == [1] * TASKS, ran  # every task ran, and only once
    assert sorted(int(task) for task in ran) == sorted(stamp["task"] for stamp in stamps)
    by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for stamp in stamps:
        by_gpu[stamp["gpu"]].append((stamp["start"], stamp["end"]))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two tasks overlapped on {gpu}"

    with engine.connect() as connection:
        states = Counter(connection.execute(text("SELECT state FROM tasks")).scalars())
        gpu_id = connection.execute(text("SELECT min(id) FROM gpus")).scalar_one()
        stamps_ms = list(connection.execute(text(
            "SELECT ts FROM gpu_samples WHERE gpu_id = :gpu ORDER BY ts"), {"gpu": gpu_id})
            .scalars())
    assert states == {"succeeded": TASKS}
    around = [ts / 1000 for ts in stamps_ms if killed_at - 30 <= ts / 1000]
    gaps = [later - earlier for earlier, later in itertools.pairwise(around)]
    assert around and around[-1] > killed_at + took, "no samples after the takeover"
    assert max(gaps) <= TAKEOVER_BOUND_S, f"samples stopped for {max(gaps):.1f}s"
    assert duplicate_samples(engine) == 0


async def test_a_frozen_leader_is_replaced_and_writes_nothing_when_it_wakes(
        serve_lab: ServeLabFactory, engine: Engine) -> None:
    lab = await serve_lab(2)
    leader, standby = await start_pair(lab)
    epoch, _ = leadership(engine)
    os.kill(leader.pid, signal.SIGSTOP)  # recorded pid; SIGCONT or the fixture's stop ends it
    try:
        frozen = time.monotonic()
        await until_role(standby, "leader", TAKEOVER_BOUND_S, engine)
        assert time.monotonic() - frozen <= TAKEOVER_BOUND_S
        new_epoch, since_s = leadership(engine)
        assert new_epoch == epoch + 1
        before = samples_before(engine, int(since_s * 1000))
        await wait_ready(standby)  # the new leader samples
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    code, stderr = await exits_with(leader, 20.0)
    assert code == 4 and "lost the leadership" in stderr, stderr
    assert samples_before(engine, int(since_s * 1000)) == before  # its buffer stayed unwritten
    assert duplicate_samples(engine) == 0
    assert await role_of(standby) == "leader"

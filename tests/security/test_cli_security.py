"""Security of the real CLI against OpenSSH namespace hosts (root only): host keys, literal
arguments, task-directory escapes, escapes in tables, private files without secrets.

Library-level host-key policy is proven in tests/engine/test_ssh_hostkeys.py; here each point is
checked through separate `fleet` processes, as an operator would meet it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from pathlib import Path

import pytest
import yaml

from fleet.sim import gpus as scenarios
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import CliResult, FleetCli
from tests.fixtures.cluster import ClusterFactory
from tests.monitor.test_monitor_cli import MonitorProcess
from tests.reliability.lab import write_controller_files

pytestmark = [pytest.mark.root, pytest.mark.slow]

ESC = "\x1b"
SECRET_ENV = "s3cr3t-token-5f1e"


async def one_host(netns_cluster: ClusterFactory, name: str = "sec1") -> Cluster:
    built = await netns_cluster([ClusterHostSpec(name, scenarios.idle(2, host=name))])
    assert isinstance(built, Cluster)
    return built


def no_escapes(result: CliResult) -> None:
    assert ESC not in result.stdout and ESC not in result.stderr
    assert "\x07" not in result.stdout and "\x9b" not in result.stdout


async def test_host_keys_unknown_refused_pinned_across_processes_changed_refused(
    netns_cluster: ClusterFactory, fleet_cli: FleetCli
) -> None:
    cluster = await one_host(netns_cluster)
    inventory = fleet_cli.home / "inventory.yaml"
    inventory.write_text(cluster.inventory_file.read_text())

    unknown = await fleet_cli.run("--json", "status", "--timeout", "20s")
    assert unknown.returncode != 0
    assert "unknown" in (unknown.stdout + unknown.stderr).lower()
    assert "--accept-new" in unknown.stdout + unknown.stderr

    pinned = await fleet_cli.run("status", "--accept-new", "--timeout", "20s")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    again = await fleet_cli.run("status", "--timeout", "20s")  # a second process: pin persists
    assert again.returncode == 0, again.stdout + again.stderr

    cluster.hosts[0].rotate_host_key()
    changed = await fleet_cli.run("--json", "status", "--accept-new", "--timeout", "20s")
    assert changed.returncode != 0
    assert "changed" in (changed.stdout + changed.stderr).lower()


async def test_metacharacters_are_literal_and_task_dirs_cannot_be_escaped(
    netns_cluster: ClusterFactory, fleet_cli: FleetCli
) -> None:
    cluster = await one_host(netns_cluster)
    write_controller_files(cluster, fleet_cli)
    host = cluster.hosts[0]
    weird_dir = fleet_cli.home / "d;touch $HOME/pwned1"
    weird_dir.mkdir(parents=True)
    script = weird_dir / "a b;$(touch ~p2)`touch p3`'q.py"
    script.write_text("import sys, os\nprint(repr(sys.argv[1:]), os.getcwd())\n")
    args = ["$(touch /tmp/pwned4)", "; touch pwned5", "`id`", "'\"", "a\nb", "--", "*"]

    dispatched = await fleet_cli.run("dispatch", str(script), *args, timeout=90)
    assert dispatched.returncode == 0, dispatched.stderr
    assert repr(args) in dispatched.stdout
    ran = await fleet_cli.run("run", str(script), *args, timeout=90)
    assert ran.returncode == 0, ran.stderr
    assert repr(args) in ran.stdout

    # --with: a `..` path lands inside the task directory under its own name; symlinks that
    # point outside the --with directory are refused before anything is uploaded.
    outside = fleet_cli.home / "outside.txt"
    outside.write_text("outside\n")
    sub = fleet_cli.home / "sub"
    sub.mkdir()
    reader = fleet_cli.home / "reader.py"
    reader.write_text("import os\nprint(sorted(os.listdir('.')))\n")
    dotted = await fleet_cli.run("dispatch", "--with", str(sub / ".." / "outside.txt"),
                                 str(reader), timeout=90)
    assert dotted.returncode == 0, dotted.stderr
    assert "'outside.txt'" in dotted.stdout
    linked = fleet_cli.home / "linked"
    linked.mkdir()
    (linked / "passwd").symlink_to("/etc/passwd")
    (linked / "up").symlink_to("..")
    refused = await fleet_cli.run("dispatch", "--with", str(linked), str(reader), timeout=90)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "symlink" in refused.stderr

    home = host.home_dir
    leaked = sorted(str(path) for path in [*home.rglob("pwned*"), *home.rglob("p2"),
                                           *home.rglob("p3"), *home.rglob("~p2")])
    assert leaked == []
    assert not list(host.tmp_dir.glob("pwned*"))
    assert not any(path.name == "outside.txt" for path in home.iterdir())


async def test_escapes_in_names_and_output_are_neutralised_in_cli_tables(
    netns_cluster: ClusterFactory, fleet_cli: FleetCli
) -> None:
    cluster = await one_host(netns_cluster)
    write_controller_files(cluster, fleet_cli)
    host = cluster.hosts[0]
    # The host's "python" rewrites every GPU name in the probe's output to a hostile one.
    filter_program = (
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    data = json.loads(line)\n"
        "    for gpu in data.get('gpus') or []:\n"
        "        gpu['name'] = '\\x1b[2J\\x1b]0;pwned\\x07\\x9b31mEvil ' + str(gpu.get('name'))\n"
        "    print(json.dumps(data), flush=True)\n"
    )
    (host.home_dir / "filter.py").write_text(filter_program)
    wrapper = host.home_dir / "hostile-python"
    wrapper.write_text('#!/bin/sh\npython3 "$@" | python3 "$HOME/filter.py"\n')
    wrapper.chmod(0o755)
    inventory = yaml.safe_load((fleet_cli.home / "inventory.yaml").read_text())
    inventory["hosts"][host.name]["python"] = "/root/hostile-python"
    (fleet_cli.home / "inventory.yaml").write_text(yaml.safe_dump(inventory))

    status = await fleet_cli.run("status", "--timeout", "30s")
    assert status.returncode == 0, status.stdout + status.stderr
    no_escapes(status)
    assert "Evil" in status.stdout
    for command in (("hosts",), ("history", "gpus", "--since", "1h")):
        listed = await fleet_cli.run(*command)
        assert listed.returncode == 0, listed.stderr
        no_escapes(listed)

    noisy = fleet_cli.home / "noisy.py"
    noisy.write_text("import sys\nprint('\\x1b[2J\\x1b]0;pwned\\x07out')\nsys.exit(3)\n")
    dispatched = await fleet_cli.run("dispatch", "--python", "python3", "--name",
                                     "t\x1b]0;pwned\x07x", str(noisy),
                                     timeout=90)
    assert dispatched.returncode == 3, dispatched.stderr
    tasks = await fleet_cli.run("tasks", "--all")
    assert tasks.returncode == 0, tasks.stderr
    no_escapes(tasks)
    assert "pwned" in tasks.stdout  # the row is shown, made harmless


async def test_db_and_log_files_are_private_and_hold_no_secrets(
    netns_cluster: ClusterFactory, fleet_cli: FleetCli
) -> None:
    cluster = await one_host(netns_cluster)
    write_controller_files(cluster, fleet_cli)
    status = await fleet_cli.run("status", "--timeout", "30s")
    assert status.returncode == 0, status.stderr
    script = fleet_cli.home / "env.py"
    script.write_text("import os\nprint(len(os.environ['TOKEN']))\n")
    dispatched = await fleet_cli.run("dispatch", "--env", f"TOKEN={SECRET_ENV}", str(script),
                                     timeout=90)
    assert dispatched.returncode == 0, dispatched.stderr
    assert dispatched.stdout.strip().endswith(str(len(SECRET_ENV)))
    log_file = fleet_cli.home / "logs" / "monitor.log"
    monitor = await MonitorProcess.start(fleet_cli, "-q", "--log-file", str(log_file))
    await asyncio.sleep(3)
    code, stderr = await monitor.finish(signal.SIGTERM)
    assert code == 0, stderr

    private_files = [fleet_cli.db_path, log_file]
    private_files += [Path(f"{fleet_cli.db_path}{suffix}") for suffix in ("-wal", "-shm")
                      if Path(f"{fleet_cli.db_path}{suffix}").exists()]
    for path in private_files:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    key_lines = [line for line in cluster.client_key.read_text().splitlines()
                 if line and not line.startswith("-----")]
    for path in private_files:
        content = path.read_bytes()
        assert SECRET_ENV.encode() not in content, f"--env value stored in {path}"
        for line in key_lines:
            assert line.encode() not in content, f"private key material in {path}"

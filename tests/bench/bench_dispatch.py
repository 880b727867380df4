"""Figure 3: dispatch overhead of a trivial script: `fleet dispatch` vs scp + ssh vs Ansible."""

from __future__ import annotations

import shlex
import subprocess

from tests.bench.common import (
    FLEET_CLI,
    Figure,
    Results,
    fleet_env,
    log,
    measure_command,
    peer_binary,
)
from tests.bench.lab import HostSet, ansible_env

SCRIPT = 'import os\nprint("hello", os.environ.get("CUDA_VISIBLE_DEVICES", "-"))\n'


def _printed_hello(done: subprocess.CompletedProcess[bytes]) -> str | None:
    if done.returncode != 0:
        return f"exit {done.returncode}"
    return None if b"hello" in done.stdout else "the script's output did not come back"


def dispatch(results: Results, host_set: HostSet, runs: int) -> None:
    host = host_set.names[0]
    lab = host_set.lab
    script = host_set.workdir / "hello.py"
    script.write_text(SCRIPT)
    env = fleet_env(host_set.home, host_set.db_path)
    inventory = str(host_set.fleet_inventory)
    log(f"dispatch to {host}, {runs} runs each")
    # fleet places from what it has recorded: one `fleet status` first (not timed)
    subprocess.run([*FLEET_CLI, "--inventory", inventory, "status"], env=env, check=True,
                   capture_output=True, timeout=120)
    fleet = measure_command(
        "fleet dispatch", [*FLEET_CLI, "--inventory", inventory, "dispatch", str(script)],
        runs=runs, env=env, check=_printed_hello,
        note="place, claim, upload, start, stream, record, release: one CLI process")
    config = shlex.quote(str(lab.ssh_config_file))
    remote = f"/tmp/bench-{host}.py"
    peers = [measure_command(
        "scp + ssh python3",
        ["sh", "-c", f"scp -q -F {config} {shlex.quote(str(script))} {host}:{remote} && "
                     f"ssh -F {config} -n {host} python3 {remote}"],
        runs=runs, check=_printed_hello,
        note="two OpenSSH connections (curve25519), no placement, no record")]
    ansible = peer_binary("ansible")
    if ansible:
        peers.append(measure_command(
            "ansible -m script",
            [ansible, "all", "-m", "script", "-a", f"{script} executable=python3"],
            runs=max(2, runs // 2), env=ansible_env(host_set), check=_printed_hello,
            note="pipelining, fresh connections"))
    else:
        results.skip("dispatch: ansible -m script", "ansible not installed")
    figure = Figure(
        section="dispatch", name="dispatch a trivial script, 1 host", unit="s",
        compares="wall time from command start to the script's output and exit, one host",
        fleet=fleet, peers=peers, target="≤ 1.5× scp + ssh")
    ratio = figure.ratios().get("scp + ssh python3")
    if ratio is not None:
        figure.verdict = f"{ratio:.2f}× scp+ssh ({'meets' if ratio <= 1.5 else 'misses'} ≤1.5×)"
    results.add(figure)

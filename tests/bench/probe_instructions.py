"""Instructions one one-shot probe costs a host, under callgrind, with the floors beside it.

A host's CPU per probe moves with the box's load by more than a change to the probe saves; the
instructions it executes barely move. Each tree's probe program (built by that tree's
fleet.probe.bundle) runs as probe_command runs it, under the hosts' /usr/bin/python3 and the
simulated NVML (8 GPUs), its code cache warmed first, as on a host probed before. Floors, in
the same run: `python3 -S` importing only what the bootstrap and the shipped pynvml import
(the least any probe through the binding costs), and bare `python3 -S`.

Needs valgrind (Debian: valgrind); no root.

Run: python -m tests.bench.probe_instructions [TREE ...]   (default: this checkout)
Prints one JSON line: millions of instructions per probe for each tree and floor.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench.bench_startup import least_probe_statement
from tests.bench.common import ROOT

PYTHON = "/usr/bin/python3"
_BUILD = (
    "import sys; from fleet.probe.bundle import probe_command, probe_program;"
    "sys.stdout.buffer.write(probe_program('once', None));"
    "sys.stderr.write(probe_command(sys.argv[1]))"
)


def _instructions(argv: list[str], env: dict[str, str], stdin: Path | None = None) -> float:
    """Millions of instructions `argv` executes (following exec), counted by callgrind."""
    with tempfile.TemporaryDirectory(prefix="fleet-callgrind-") as workdir:
        out = Path(workdir) / "callgrind.out"
        with open(stdin or os.devnull, "rb") as feed:
            subprocess.run(
                ["valgrind", "--tool=callgrind", "--trace-children=yes",
                 f"--callgrind-out-file={out}", *argv],
                stdin=feed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                check=True, timeout=300)
        for line in out.read_text().splitlines():
            if line.startswith("totals:"):
                return round(int(line.split()[1]) / 1e6, 2)
    raise RuntimeError(f"no totals from callgrind for {argv[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("probe_instructions: valgrind is not installed (Debian: apt install valgrind)")
    from fleet.probe.bundle import shipped_pynvml_source
    from fleet.sim import gpus as scenarios
    from fleet.sim.build import build_sim_tools
    from fleet.sim.gpus import write_config

    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-probe-instr-") as workdir:
        work = Path(workdir)
        tools = build_sim_tools(ROOT / ".fleet-cache" / "sim")
        config = work / "gpus.conf"
        write_config(config, scenarios.mixed(8, host="bench"))
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("PYTHON")}
        env.update(tools.env(config), XDG_CACHE_HOME=str(work / "cache"))
        for tree in args.trees:
            program = work / f"probe-{len(counts)}.bin"
            built = subprocess.run(
                [sys.executable, "-c", _BUILD, PYTHON], cwd=tree, capture_output=True,
                env={**os.environ, "PYTHONPATH": str(tree)}, check=True, timeout=120)
            program.write_bytes(built.stdout)
            command = ["sh", "-c", built.stderr.decode()]
            subprocess.run(command, stdin=program.open("rb"), stdout=subprocess.DEVNULL,
                           env=env, check=True, timeout=60)  # warms the host's code cache
            counts[f"probe ({tree})"] = _instructions(command, env, program)
        statement = least_probe_statement(shipped_pynvml_source())
        counts["python3 -S + the binding's imports"] = _instructions(
            ["sh", "-c", f"exec {PYTHON} -S -c {shlex.quote(statement)}"], env)
        counts["python3 -S -c pass"] = _instructions([PYTHON, "-S", "-c", "pass"], env)
    print(json.dumps({"million_instructions_per_probe": counts}))


if __name__ == "__main__":
    main()

"""--venv and --snapshot through a real `fleet serve`: the environment and the snapshot's files
travel with the submission, and a host that lacks the environment is named in the refusal."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.server.conftest import ServeLabFactory

WHERE = """\
import json, os, sys
import helper
print(json.dumps({"prefix": sys.prefix, "venv": os.environ.get("VIRTUAL_ENV"),
                  "value": helper.VALUE, "cwd": os.getcwd()}))
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True, timeout=30)


async def test_venv_and_snapshot_through_the_server(serve_lab: ServeLabFactory,
                                                    tmp_path: Path) -> None:
    lab = await serve_lab(1)
    home = lab.hosts[0].host.home
    # Made before the server starts: these blocking calls would stall the event loop that
    # serves the simulated hosts' SSH.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venvs" / "demo")],
                   check=True, timeout=120)
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "where.py").write_text(WHERE)
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    (repo / "helper.py").write_text("VALUE = 'snapshot'\n")  # untracked, not ignored
    (repo / "big.log").write_text("ignored\n")
    await lab.serve()

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "dispatch", "--snapshot", "--venv",
        "~/venvs/demo", "where.py", cwd=repo, env=lab.cli.env(lab.env()),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)

    assert process.returncode == 0, stderr.decode()
    report = json.loads(stdout.decode().strip().splitlines()[-1])
    assert report["venv"] == str(home / "venvs" / "demo")
    assert report["prefix"] == str(home / "venvs" / "demo")
    assert report["value"] == "snapshot" and report["cwd"].endswith("/snapshot")
    listing = (await lab.run("--json", "tasks", "--all")).json()["tasks"]
    (task,) = listing
    assert task["environment"]["tool"] == str(home / "venvs" / "demo")
    assert task["snapshot"]["files"] == 3 and task["script"] == "where.py"
    assert not list(Path(report["cwd"]).glob("*.log"))

    refused = await lab.run("dispatch", "--venv", "/nonexistent", str(repo / "where.py"))
    assert refused.returncode == 5, refused.stderr
    assert "gpu1: cannot run in --venv /nonexistent: no virtual environment" in refused.stderr
    assert json.loads((await lab.run("--json", "allocations")).stdout)["allocations"] == []

"""`--env PATH=…` (and names like the wrapper's own variables) reach the task, not the wrapper.

The wrapper's own steps (date, setsid, cat, mv, the watchdog's sleep, a container cleanup's
arguments) run in the environment the wrapper started with; the task's --env variables apply
only to the command, so a PATH without /usr/bin cannot stop the wrapper recording the task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from fleet.dispatch.environment import TaskEnvironment
from fleet.dispatch.spec import SHELL_ENV, build_launch, parse_env
from fleet.dispatch.wrapper import wrapper_script
from fleet.errors import ConfigError
from tests.dispatch.conftest import DispatchLab
from tests.fixtures.cli import FleetCli

LabFactory = Callable[..., Awaitable[DispatchLab]]

REPORT = """\
import json, os, sys
print(json.dumps({"path": os.environ.get("PATH"), "argv": sys.argv[1:],
                  "venv": os.environ.get("VIRTUAL_ENV"),
                  "env": {name: os.environ.get(name) for name in sys.argv[1:]}}))
"""


def _python_only_dir(base: Path) -> Path:
    """A directory holding nothing but a `python3` symlink to this test's interpreter."""
    bin_dir = base / "only-python"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_dispatch_with_env_path_runs_and_is_recorded(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    bin_dir = _python_only_dir(lab.cli.home)
    script = lab.cli.home / "report.py"
    script.write_text(REPORT)

    # --python python3 is looked up on the user's PATH (only bin_dir has one); --timeout makes
    # the wrapper start its watchdog (sleep, cat) as well.
    result = await lab.cli.run("dispatch", "--env", f"PATH={bin_dir}", "--python", "python3",
                               "--timeout", "5m", str(script), "x y")

    assert result.returncode == 0, result.stderr + result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout
    report = json.loads(lines[-1])
    assert report["path"] == str(bin_dir)
    assert report["argv"] == ["x y"]
    listing = await lab.cli.run("--json", "tasks", "--all")
    assert listing.returncode == 0, listing.stderr
    (task,) = listing.json()["tasks"]
    assert task["state"] == "succeeded" and task["exit_code"] == 0
    assert task["timed_out"] is False


# ---- the wrapper alone, run by a real sh --------------------------------------------------

def _run_wrapper(tmp_path: Path, env: tuple[tuple[str, str], ...], *args: str,
                 environment: TaskEnvironment | None = None,
                 timeout_s: float | None = 300.0) -> tuple[dict[str, object], str, str]:
    """Run a wrapper for REPORT with `env`: (the task's report, the exit file, the log)."""
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    launch = build_launch(task_id=9, script=script, host_python="python3", gpu_uuids=("GPU-a",),
                          args=args, env=env, environment=environment, timeout_s=timeout_s)
    task_dir = tmp_path / "task"
    (task_dir / ".fleet").mkdir(parents=True)
    (task_dir / script.name).write_text(REPORT)  # as the upload leaves it
    wrapper = task_dir / ".fleet" / "wrapper.sh"
    wrapper.write_bytes(wrapper_script(launch, str(task_dir)))
    done = subprocess.run(["/bin/sh", str(wrapper)], capture_output=True, timeout=60,
                          check=False, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    control = task_dir / ".fleet"
    log = (control / "log").read_text()
    exit_text = (control / "exit").read_text()
    assert (control / "pid").read_text().strip().isdigit(), log
    assert (control / "started").read_text().strip().isdigit(), log
    report: dict[str, object] = json.loads(log.strip().splitlines()[-1])
    return report, exit_text, log


def test_wrapper_utilities_resolve_with_a_path_of_only_python(tmp_path: Path) -> None:
    bin_dir = _python_only_dir(tmp_path)

    report, exit_text, log = _run_wrapper(tmp_path, (("PATH", str(bin_dir)),))

    assert "rc=0\n" in exit_text and "timed_out=0" in exit_text, log
    assert "not found" not in log
    assert report["path"] == str(bin_dir)


def test_venv_bin_goes_before_the_users_path(tmp_path: Path) -> None:
    bin_dir = _python_only_dir(tmp_path)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)

    report, exit_text, log = _run_wrapper(
        tmp_path, (("PATH", str(bin_dir)),),
        environment=TaskEnvironment("venv", str(venv), tool=str(venv)))

    assert "rc=0\n" in exit_text, log
    assert report["path"] == f"{venv}/bin:{bin_dir}"
    assert report["venv"] == str(venv)


def test_container_words_expand_in_the_wrapper_and_its_client_sees_the_path(
        tmp_path: Path) -> None:
    # A stand-in docker client (found by its absolute path): "$(id -u):$(id -g)" is expanded by
    # the wrapper (`id` is not on the task's PATH); the client itself gets the task's PATH.
    bin_dir = _python_only_dir(tmp_path)
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexec python3 -c 'import json, os, sys; print(json.dumps("
                    "{\"argv\": sys.argv[1:], \"path\": os.environ.get(\"PATH\")}))' \"$@\"\n")
    fake.chmod(0o755)

    report, exit_text, log = _run_wrapper(
        tmp_path, (("PATH", str(bin_dir)),),
        environment=TaskEnvironment("container", "img", tool=str(fake)))

    assert "rc=0\n" in exit_text, log
    argv = report["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert report["path"] == str(bin_dir)


def test_names_of_the_wrapper_variables_reach_only_the_task(tmp_path: Path) -> None:
    # The wrapper's own shell variables (c: its control directory, rc, wd, to, p, s, ss): the
    # task gets them as given; the wrapper still writes its files where they belong.
    names = ("c", "rc", "wd", "to", "p", "s", "ss", "LD_LIBRARY_PATH", "CDPATH", "ENV")
    values = {name: str(tmp_path / "elsewhere") if name == "c" else f"0123456789 {name}"
              for name in names}

    report, exit_text, log = _run_wrapper(tmp_path, tuple(values.items()), *names)

    assert exit_text.startswith("rc=0\n"), log
    assert report["env"] == values
    assert not (tmp_path / "elsewhere").exists()


def test_user_variables_are_set_only_inside_the_task_environment(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("pass\n")
    launch = build_launch(task_id=3, script=script, host_python="python3", gpu_uuids=(),
                          args=(), env=(("PATH", "/nowhere"),))
    text = wrapper_script(launch, str(tmp_path)).decode()
    top_level = [line for line in text.splitlines() if not line.startswith((" ", "\t"))]
    assert not any("/nowhere" in line for line in top_level), text
    assert "  export PATH=/nowhere" in text


@pytest.mark.parametrize("name", sorted(SHELL_ENV))
def test_names_the_shell_owns_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"--env {name}: the shell that starts the task"):
        parse_env((f"{name}=x",))


async def test_cli_refuses_ifs_with_exit_2_and_records_nothing(fleet_cli: FleetCli) -> None:
    script = fleet_cli.home / "job.py"
    script.write_text("print('never')\n")

    result = await fleet_cli.run("dispatch", "--env", "IFS=:", str(script))

    assert result.returncode == 2, result.stderr
    assert "--env IFS" in result.stderr
    listing = await fleet_cli.run("--json", "tasks", "--all")
    assert listing.returncode == 0, listing.stderr
    assert listing.json()["tasks"] == []

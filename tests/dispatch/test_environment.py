"""Task environments and snapshots without SSH: options, host checks and wrappers run by sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.dispatch.environment import CHECK_EXIT, TaskEnvironment
from fleet.dispatch.request import DispatchRequest
from fleet.dispatch.snapshot import take_snapshot
from fleet.dispatch.spec import SNAPSHOT_DIR, build_launch
from fleet.dispatch.staging import pack, stage
from fleet.dispatch.wrapper import wrapper_script
from fleet.errors import ConfigError
from fleet.placement.request import PlacementRequest
from tests.fixtures.cli import FleetCli

UUIDS = ("GPU-aaa", "GPU-bbb")
# A stand-in for docker/podman/apptainer: writes the argv it got (and two variables) as JSON.
FAKE_RUNTIME = """\
#!/bin/sh
exec python3 -c 'import json, os, sys; print(json.dumps({"argv": sys.argv[1:],
  "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "mine": os.environ.get("MY_VAR")}))' "$@"
"""


def _sh(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin", **env})


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True, timeout=30)


# ---- options ------------------------------------------------------------------------------

def test_environments_exclude_each_other() -> None:
    with pytest.raises(ConfigError, match="--conda and --venv exclude each other"):
        TaskEnvironment.from_options(conda="ml", venv="/opt/v")
    with pytest.raises(ConfigError, match="--venv and --container"):
        TaskEnvironment.from_options(venv="/opt/v", container="alpine")
    assert TaskEnvironment.from_options() is None
    assert TaskEnvironment.from_options(conda="ml") == TaskEnvironment("conda", "ml")


@pytest.mark.parametrize(("kind", "value", "message"), [
    ("venv", "relative/env", "absolute or starting with ~/"),
    ("conda", "--help", "cannot start with '-'"),
    ("container", "-v/:/host", "cannot start with '-'"),
    ("container", "alpine sh", "no spaces"),
    ("venv", "/a\nb", "without NUL or newline"),
])
def test_bad_environment_values_are_refused(kind: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TaskEnvironment(kind, value)


async def test_cli_refuses_two_environments_with_exit_2_and_records_nothing(
        fleet_cli: FleetCli) -> None:
    script = fleet_cli.home / "job.py"
    script.write_text("print('never')\n")

    result = await fleet_cli.run("dispatch", "--venv", "/opt/v", "--container", "alpine",
                                 str(script))

    assert result.returncode == 2, result.stderr
    assert "--venv and --container exclude each other" in result.stderr
    listing = await fleet_cli.run("--json", "tasks", "--all")
    assert listing.returncode == 0, listing.stderr
    assert listing.json()["tasks"] == []


# ---- host checks, run by a real sh --------------------------------------------------------

def test_venv_check_finds_a_real_venv_and_refuses_a_missing_one(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")],
                   check=True, timeout=60)
    found = _sh(TaskEnvironment("venv", "~/env").check_command(), HOME=str(tmp_path))
    assert found.returncode == 0, found.stdout
    checked = TaskEnvironment("venv", "~/env").checked(found.stdout)
    assert checked.tool == str(tmp_path / "env")
    assert checked.python() == f"{tmp_path}/env/bin/python"

    missing = _sh(TaskEnvironment("venv", "/nonexistent").check_command(), HOME=str(tmp_path))
    assert missing.returncode == CHECK_EXIT
    assert "no virtual environment there" in missing.stdout


def test_conda_check_names_every_place_it_looked(tmp_path: Path) -> None:
    result = _sh(TaskEnvironment("conda", "ml").check_command(), HOME=str(tmp_path))
    assert result.returncode == CHECK_EXIT
    assert "no conda found" in result.stdout and "/opt/conda" in result.stdout


def test_container_check_lists_each_missing_runtime(tmp_path: Path) -> None:
    # PATH without /usr/local/bin: this machine's docker client lives there.
    result = _sh(TaskEnvironment("container", "alpine").check_command(), HOME=str(tmp_path))
    assert result.returncode == CHECK_EXIT
    assert result.stdout.strip() == ("no working container runtime: docker: not installed; "
                                     "podman: not installed; apptainer: not installed")


# ---- wrappers with a fake runtime, run by a real sh ---------------------------------------

def _run_wrapper(tmp_path: Path, environment: TaskEnvironment) -> dict[str, object]:
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    launch = build_launch(task_id=7, script=script, host_python="python3", gpu_uuids=UUIDS,
                          args=("a b", "$(x)"), env=(("MY_VAR", "secret 'v'"),),
                          environment=environment)
    task_dir = tmp_path / "task"
    (task_dir / ".fleet").mkdir(parents=True)
    wrapper = task_dir / ".fleet" / "wrapper.sh"
    wrapper.write_bytes(wrapper_script(launch, str(task_dir)))
    done = subprocess.run(["/bin/sh", str(wrapper)], capture_output=True, timeout=60,
                          check=False, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    log = (task_dir / ".fleet" / "log").read_text()
    assert "rc=0" in (task_dir / ".fleet" / "exit").read_text(), log
    report: dict[str, object] = json.loads(log.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("runtime", ["docker", "podman", "apptainer"])
def test_container_command_line_reaches_the_runtime_intact(tmp_path: Path, runtime: str) -> None:
    fake = tmp_path / "bin" / runtime
    fake.parent.mkdir()
    fake.write_text(FAKE_RUNTIME)
    fake.chmod(0o755)
    task_dir = str(tmp_path / "task")

    report = _run_wrapper(tmp_path, TaskEnvironment("container", "repo/img:1", str(fake)))

    argv = report["argv"]
    assert isinstance(argv, list)
    assert argv[-4:] == ["python3", f"{task_dir}/job.py", "a b", "$(x)"]
    assert report["cuda"] == "GPU-aaa,GPU-bbb"
    assert "secret 'v'" not in json.dumps(argv)  # values travel in the environment only
    if runtime == "apptainer":
        assert argv[:2] == ["exec", "--nv"] and "docker://repo/img:1" in argv
        assert ["--pwd", task_dir] == argv[argv.index("--pwd"):argv.index("--pwd") + 2]
        return
    assert argv[:4] == ["run", "--rm", "--name", f"fleet-{Path(task_dir).name}"]
    assert argv[argv.index("-w") + 1] == task_dir
    assert f"{task_dir}:{task_dir}" in argv and "repo/img:1" in argv
    names = [argv[i + 1] for i, part in enumerate(argv) if part == "-e"]
    assert {"CUDA_VISIBLE_DEVICES", "FLEET_TASK_ID", "MY_VAR"} <= set(names)
    if runtime == "docker":
        assert argv[argv.index("--gpus") + 1] == '"device=GPU-aaa,GPU-bbb"'
        assert argv[argv.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    else:
        devices = [argv[i + 1] for i, part in enumerate(argv) if part == "--device"]
        assert devices == ["nvidia.com/gpu=GPU-aaa", "nvidia.com/gpu=GPU-bbb"]


# ---- snapshots ----------------------------------------------------------------------------

def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    (repo / "src").mkdir(parents=True)
    (repo / ".gitignore").write_text("out/\n*.log\n")
    (repo / "src" / "train.py").write_text("import helper\nprint(helper.VALUE)\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    (repo / "src" / "helper.py").write_text("VALUE = 1\n")  # untracked, not ignored
    (repo / "out").mkdir()
    (repo / "out" / "big.bin").write_bytes(b"x" * 1000)  # ignored
    (repo / "run.log").write_text("ignored\n")
    return repo


def _request(script: Path) -> DispatchRequest:
    return DispatchRequest(script=script, placement=PlacementRequest(gpus=1))


def test_snapshot_copies_what_git_keeps_and_runs_in_the_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (tmp_path / "into").mkdir()

    request = take_snapshot(_request(repo / "src" / "train.py"), repo / "src",
                            tmp_path / "into")
    (repo / "src" / "helper.py").write_text("VALUE = 2\n")  # an edit after submission

    snapshot = request.snapshot
    assert snapshot is not None and snapshot.script == "src/train.py" and snapshot.cwd == "src"
    assert snapshot.commit is not None and len(snapshot.commit) == 40 and snapshot.files == 3
    copied = sorted(path.relative_to(snapshot.copy).as_posix()
                    for path in snapshot.copy.rglob("*") if path.is_file())
    assert copied == [".gitignore", "src/helper.py", "src/train.py"]
    assert (snapshot.copy / "src" / "helper.py").read_text() == "VALUE = 1\n"
    launch = request.validate()
    assert launch.script_name == f"{SNAPSHOT_DIR}/src/train.py"
    assert launch.default_workdir == f"{SNAPSHOT_DIR}/src"
    assert request.shown_script == str(repo / "src" / "train.py")
    assert request.stored_constraints()["snapshot"] == snapshot.to_dict()


def test_snapshot_outside_a_git_tree_is_a_config_error(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print(1)\n")
    (tmp_path / "into").mkdir()
    with pytest.raises(ConfigError, match="is not inside a git work tree"):
        take_snapshot(_request(script), tmp_path, tmp_path / "into")


def test_environment_and_snapshot_survive_the_trip_to_fleet_serve(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (tmp_path / "into").mkdir()
    request = take_snapshot(_request(repo / "src" / "train.py"), repo, tmp_path / "into")
    request = replace(request, environment=TaskEnvironment("conda", "ml"))
    wire = pack(request, follow=True)
    staged_dir = tmp_path / "staged"
    staged_dir.mkdir()

    staged = stage(wire, staged_dir)

    assert staged.environment == TaskEnvironment("conda", "ml")
    assert staged.snapshot is not None and staged.snapshot.copy == staged_dir / SNAPSHOT_DIR
    assert (staged_dir / SNAPSHOT_DIR / "src" / "helper.py").read_text() == "VALUE = 1\n"
    assert not (staged_dir / SNAPSHOT_DIR / "run.log").exists()
    launch = staged.validate()
    assert launch.script_name == f"{SNAPSHOT_DIR}/src/train.py"
    assert launch.default_workdir == SNAPSHOT_DIR

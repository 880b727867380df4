"""The host side of a task over real SSH (SimSshHost): argv, env, exit code, timeout, signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from fleet.dispatch.remote import RemoteStatus, TaskHost, start_task
from fleet.dispatch.spec import TaskLaunch, build_launch, choose_interpreter, parse_env
from fleet.errors import ConfigError
from tests.dispatch.conftest import group_alive, wait_group_gone
from tests.fixtures.sshserver import SimHostHandle

HOSTILE_ARGS = (
    "$(touch /tmp/fleet-pwned)", "; rm -rf /", "it's", 'say "hi"', "line1\nline2", "  spaced  ",
    "naïve ☃", "--leading-dash", "-x", "", "`id`", "a\\b", "*", "$HOME", "\t", "'", '"',
)

ECHO_SCRIPT = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(),
                  "env": {k: os.environ.get(k) for k in
                          ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FLEET_TASK_ID",
                           "FLEET_TASK_DIR", "MY_VAR")}}))
sys.stdout.flush()
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


async def wait_exited(host: TaskHost, task_dir: str, timeout: float = 10.0) -> RemoteStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        status = await host.status(task_dir)
        if status.state == "exited":
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"task in {task_dir} did not finish within {timeout}s")


def _launch(tmp_path: Path, source: str, *, name: str = "job.py", task_id: int = 1,
            **kwargs: object) -> TaskLaunch:
    script = tmp_path / name
    script.write_text(source)
    return build_launch(task_id=task_id, script=script, host_python=sys.executable,
                        gpu_uuids=("GPU-aaa", "GPU-bbb"), **kwargs)  # type: ignore[arg-type]


async def test_arguments_and_environment_arrive_exactly(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, handle = task_host
    launch = _launch(tmp_path, ECHO_SCRIPT, args=HOSTILE_ARGS, task_id=42,
                     env=(("MY_VAR", "x y $(z) 'q'"), ("EXIT_WITH", "7")))

    task_dir, pgid = await start_task(host, launch)
    status = await wait_exited(host, task_dir)
    log = await host.read_log(task_dir, 0)

    assert status.exit_code == 7 and not status.timed_out
    assert status.started_at is not None and status.ended_at is not None
    assert pgid is not None and pgid > 1
    report = json.loads(log)
    assert report["argv"] == list(HOSTILE_ARGS)
    assert report["cwd"] == task_dir
    assert report["env"] == {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb",
                             "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "FLEET_TASK_ID": "42",
                             "FLEET_TASK_DIR": task_dir, "MY_VAR": "x y $(z) 'q'"}
    assert task_dir.startswith(str(handle.host.home.resolve() / ".fleet" / "tasks" / "42-"))
    assert (Path(task_dir).stat().st_mode & 0o777) == 0o700
    assert not Path("/tmp/fleet-pwned").exists()


async def test_shell_script_stderr_and_workdir(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    launch = _launch(tmp_path, 'echo out; echo err >&2; pwd; exit 3\n', name="run.sh",
                     workdir=str(workdir))
    task_dir, _ = await start_task(host, launch)
    status = await wait_exited(host, task_dir)
    log = (await host.read_log(task_dir, 0)).decode()
    assert status.exit_code == 3
    assert log.splitlines() == ["out", "err", str(workdir)]


async def test_missing_workdir_fails_with_126(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    launch = _launch(tmp_path, "print('never')\n", workdir=str(tmp_path / "absent"))
    task_dir, _ = await start_task(host, launch)
    status = await wait_exited(host, task_dir)
    assert status.exit_code == 126
    assert b"cannot enter work directory" in await host.read_log(task_dir, 0)


async def test_timeout_in_wrapper_kills_group(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    source = ("import subprocess, time\nsubprocess.Popen(['sleep', '60'])\n"
              "print('up', flush=True)\ntime.sleep(60)\n")
    launch = _launch(tmp_path, source, timeout_s=0.5, timeout_grace_s=0.5)
    task_dir, pgid = await start_task(host, launch)
    assert pgid is not None
    status = await wait_exited(host, task_dir, timeout=10)
    assert status.timed_out
    assert status.exit_code == 143
    assert await asyncio.to_thread(wait_group_gone, pgid, 5.0)
    assert b"timed out after 0.5s" in await host.read_log(task_dir, 0)


async def test_term_signal_reaches_whole_group_kill_after(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    # Ignores TERM: only the KILL after the grace period ends it; its child dies on TERM.
    source = ("import signal, subprocess, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "subprocess.Popen(['sleep', '60'])\nprint('ready', flush=True)\ntime.sleep(60)\n")
    launch = _launch(tmp_path, source)
    task_dir, pgid = await start_task(host, launch)
    assert pgid is not None
    for _ in range(100):
        if b"ready" in await host.read_log(task_dir, 0):
            break
        await asyncio.sleep(0.05)
    assert await host.signal(task_dir, "TERM", cancel=True) == "ALIVE"
    assert group_alive(pgid)
    assert await host.signal(task_dir, "KILL", cancel=True) in ("DEAD", "ALIVE")
    status = await wait_exited(host, task_dir)
    assert status.exit_code == 137 and status.cancelled
    assert await asyncio.to_thread(wait_group_gone, pgid, 5.0)


async def test_processes_that_left_the_group_end_with_the_task(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    pids = tmp_path / "daemons"
    # A daemon in a session of its own (setsid) and one double-forked out of it: neither is in
    # the task's process group, and both used to hold the GPUs after the task had ended.
    source = ("import os, subprocess, sys\n"
              "daemon = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
              "double = subprocess.Popen(['sh', '-c', 'sleep 300 >/dev/null & echo $!'], "
              "stdout=subprocess.PIPE, start_new_session=True)\n"
              "orphan = double.stdout.read().strip().decode()\n"
              f"open({str(pids)!r}, 'w').write(f'{{daemon.pid}} {{orphan}}')\n")
    launch = _launch(tmp_path, source)
    task_dir, _ = await start_task(host, launch)
    left: list[int] = []
    try:
        status = await wait_exited(host, task_dir)
        assert status.exit_code == 0, await host.read_log(task_dir, 0)
        left = [int(pid) for pid in pids.read_text().split()]
        assert len(left) == 2
        for _ in range(100):  # the wrapper's sweep ran before it wrote the exit file
            if not any(_alive(pid) for pid in left):
                break
            await asyncio.sleep(0.05)
        assert [pid for pid in left if _alive(pid)] == []
    finally:
        for pid in left:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def test_status_gone_when_wrapper_vanished(
    task_host: tuple[TaskHost, SimHostHandle], tmp_path: Path
) -> None:
    host, _ = task_host
    launch = _launch(tmp_path, "import time\ntime.sleep(60)\n")
    task_dir, pgid = await start_task(host, launch)
    assert pgid is not None
    wrapper_pid = int((Path(task_dir) / ".fleet" / "wrapper.pid").read_text())
    import os
    import signal
    os.kill(wrapper_pid, signal.SIGKILL)
    os.killpg(pgid, signal.SIGKILL)
    assert await asyncio.to_thread(wait_group_gone, pgid, 5.0)
    for _ in range(50):
        status = await host.status(task_dir)
        if status.state == "gone":
            break
        await asyncio.sleep(0.05)
    assert status.state == "gone" and status.exit_code is None
    missing = await host.status(task_dir + "-nonexistent")
    assert missing.state == "gone" and missing.dir_missing


@pytest.mark.parametrize("bad", ["..", ".", "../..", ".fleet"])
def test_with_names_that_escape_are_refused(tmp_path: Path, bad: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "a.py"
    script.write_text("")
    (tmp_path / ".fleet").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="not allowed"):
        build_launch(task_id=1, script=script, host_python="python3", gpu_uuids=(),
                     extras=(Path(bad),))


def test_with_symlinks_inside_are_copied_outside_refused(tmp_path: Path) -> None:
    script = tmp_path / "a.py"
    script.write_text("")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "real.txt").write_text("x")
    (data / "inside").symlink_to(data / "sub" / "real.txt")
    launch = build_launch(task_id=1, script=script, host_python="python3", gpu_uuids=(),
                          extras=(data,))
    assert [item.remote for item in launch.uploads] == \
        ["a.py", "data", "data/sub", "data/inside", "data/sub/real.txt"]
    secret = tmp_path / "secret"
    secret.write_text("s")
    (data / "leak").symlink_to(secret)
    with pytest.raises(ConfigError, match="points outside"):
        build_launch(task_id=1, script=script, host_python="python3", gpu_uuids=(),
                     extras=(data,))
    (data / "leak").unlink()
    (data / "dirlink").symlink_to(data / "sub")
    with pytest.raises(ConfigError, match="symlink to a directory"):
        build_launch(task_id=1, script=script, host_python="python3", gpu_uuids=(),
                     extras=(data,))


def test_interpreter_from_file_type_and_env_names(tmp_path: Path) -> None:
    py, sh, exe, other = (tmp_path / n for n in ("a.py", "b.sh", "c", "d.txt"))
    for path in (py, sh, exe, other):
        path.write_text("")
    exe.chmod(0o755)
    assert choose_interpreter(py, "/opt/py3", None) == ("/opt/py3",)
    assert choose_interpreter(sh, "python3", None) == ("bash",)
    assert choose_interpreter(exe, "python3", None) == ()
    assert choose_interpreter(other, "python3", "/usr/bin/python3.11") == ("/usr/bin/python3.11",)
    with pytest.raises(ConfigError, match="cannot tell how to run"):
        choose_interpreter(other, "python3", None)
    assert parse_env(("A=1", "B_2=x=y", "C=")) == (("A", "1"), ("B_2", "x=y"), ("C", ""))
    for bad in ("1A=x", "A-B=x", "noequals", "CUDA_VISIBLE_DEVICES=0"):
        with pytest.raises(ConfigError):
            parse_env((bad,))

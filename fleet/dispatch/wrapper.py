"""The POSIX sh programs fleet runs on a host: task wrapper, launcher, status, signal, cleanup.

Files in a task's control directory (`<task dir>/.fleet/`):
    wrapper.sh   this module's wrapper; wrapper.pid its pid (a session leader)
    pid          the task's process group id (the command runs in its own session), written
                 by one echo: readers see it empty or whole, and treat empty as not yet there
    log          the command's stdout and stderr, appended
    started      epoch seconds when the command started (host clock)
    exit         written atomically when the command ended: rc=, ended=, timed_out=
    cancelled    present when fleet sent a cancel. The command's shell writes `pid` and then
                 looks for it; a cancel writes it and then reads `pid`. So a cancel that
                 lands while the task starts either finds the group to signal, or the
                 command never runs.

The wrapper's own steps (date, setsid, cat, mv, the watchdog's sleep, its variables c, rc, …)
run in the environment it started with. The task's variables (--env, then its environment's
lines: the venv's PATH, …) are set only by `task_env`, in a subshell that then execs one command
(`in_task_env`: the task's start, a container's cleanup), so `--env PATH=/x`, `LD_LIBRARY_PATH`
or a name like `c` reach the task as given and cannot stop the wrapper from recording it. The
command's words are expanded by the wrapper before that (`$(id -u)`, "$PWD", "$HOME"), setsid is
found on the wrapper's PATH, and the task's command itself on the task's PATH. Names the sh
itself owns (IFS, PWD, …) are refused earlier: spec.SHELL_ENV.

Every value that comes from a user or from the controller is inserted with shlex.quote.
"""

from __future__ import annotations

import shlex

from fleet.dispatch.spec import CONTROL_DIR, TaskLaunch

# Variables fleet sets to a path relative to the task directory (gang.node_env).
TASK_DIR_PATH_ENV = frozenset({"FLEET_HOSTFILE"})

TASKS_BASE = ".fleet/tasks"  # relative to the remote user's $HOME
RUN_BASE = ".fleet/run"  # `fleet run script.py` temporary directories
# The launcher looks for the pid file every PID_WAIT_STEP_S, at most PID_WAIT_STEPS times (10 s):
# the wrapper writes it within milliseconds, and each step is latency on every dispatch.
PID_WAIT_STEP_S = "0.01"
PID_WAIT_STEPS = 1000
STATUS_EXIT = "EXIT"
STATUS_RUNNING = "RUNNING"
STATUS_STARTING = "STARTING"
STATUS_GONE = "GONE"

_WRAPPER = """\
#!/bin/sh
# fleet task {task_id}: run the command in its own session, record pid, log and exit status.
c={control}
echo "$$" > "$c/wrapper.pid"
export CUDA_VISIBLE_DEVICES={uuids}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export FLEET_TASK_ID={task_id}
export FLEET_TASK_DIR={task_dir}
# The task's own variables: set only in the subshell that runs a task command (in_task_env).
task_env() {{
{task_env}
}}
in_task_env() {{ (task_env && exec "$@"); }}
ss=$(command -v setsid) || ss=setsid
wd=
to=0
if cd {workdir} 2>>"$c/log"; then
  date +%s > "$c/started"
{watchdog}
  in_task_env "$ss" /bin/sh -c \\
    'echo "$$" > "$1/pid" && [ ! -e "$1/cancelled" ] && shift && exec "$@"' \\
    fleet-task "$c" {command} </dev/null >>"$c/log" 2>&1
  rc=$?
{cleanup}
  if [ -n "$wd" ]; then kill "$wd" 2>/dev/null; fi
  if [ -e "$c/timed_out" ]; then to=1; fi
  p=$(cat "$c/pid" 2>/dev/null)
  case $p in ''|*[!0-9]*) ;; *) kill -s KILL -- "-$p" 2>/dev/null ;; esac
{sweep}
else
  echo "fleet: cannot enter work directory "{workdir} >> "$c/log"
  date +%s > "$c/started"
  rc=126
fi
printf 'rc=%s\\nended=%s\\ntimed_out=%s\\n' "$rc" "$(date +%s)" "$to" > "$c/exit.tmp"
mv -f "$c/exit.tmp" "$c/exit"
"""

# Processes the task left behind outside its group (setsid, a double fork: daemons) still carry
# its FLEET_TASK_DIR, which the wrapper itself does not (/proc/PID/environ is what a process was
# started with): killed as the group was, so none holds the GPUs once the task has ended. At
# most three passes (one that forked while the last was read). grep fails on other users' and
# gone processes (status 2): what it lists counts. Needs GNU grep's -z (elsewhere nothing is
# listed, and the sweep is skipped).
_SWEEP = """\
  n=0
  while [ "$n" -lt 3 ]; do
    left=$(grep -lzxF -e "FLEET_TASK_DIR=$FLEET_TASK_DIR" /proc/[0-9]*/environ 2>/dev/null)
    if [ -z "$left" ]; then break; fi
    for e in $left; do
      e=${e#/proc/}; e=${e%/environ}
      kill -s KILL "$e" 2>/dev/null
    done
    n=$((n+1))
  done"""

# A background watchdog: TERM to the task's group after the limit, KILL after the grace.
_WATCHDOG = """\
  (
    s=
    trap 'if [ -n "$s" ]; then kill "$s" 2>/dev/null; fi; exit 0' TERM
    sleep {limit} & s=$!; wait "$s"
    p=$(cat "$c/pid" 2>/dev/null)
    case $p in ''|*[!0-9]*) exit 0 ;; esac
    echo 1 > "$c/timed_out"
    echo "fleet: task timed out after {limit}s" >> "$c/log"
    kill -s TERM -- "-$p" 2>/dev/null
    sleep {grace} & s=$!; wait "$s"
    kill -s KILL -- "-$p" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  wd=$!"""


def _seconds(value: float) -> str:
    return f"{max(value, 0.001):.3f}".rstrip("0").rstrip(".")


def task_command(launch: TaskLaunch, task_dir: str) -> list[str]:
    """The argv run on the host: interpreter (if any), absolute script path, arguments."""
    return [*launch.interpreter, f"{task_dir}/{launch.script_name}", *launch.args]


def task_workdir(launch: TaskLaunch, task_dir: str) -> str:
    """Where the task runs: --workdir, else its place in the task directory (--snapshot)."""
    if launch.workdir:
        return launch.workdir
    return f"{task_dir}/{launch.default_workdir}" if launch.default_workdir else task_dir


def command_text(launch: TaskLaunch, task_dir: str) -> str:
    """The task's command as shell words, inside its environment (--venv/--conda/--container)."""
    argv = task_command(launch, task_dir)
    if launch.environment is None:
        return " ".join(shlex.quote(part) for part in argv)
    return launch.environment.command(argv, task_dir=task_dir, gpu_uuids=launch.gpu_uuids,
                                      env_names=tuple(name for name, _ in launch.env),
                                      own_workdir=launch.workdir is not None)


def task_env_value(name: str, value: str, task_dir: str) -> str:
    """The value the task gets: a relative path fleet names inside the task directory (a
    gang's FLEET_HOSTFILE) made absolute, so it holds wherever --workdir puts the task."""
    if name in TASK_DIR_PATH_ENV and not value.startswith("/"):
        return f"{task_dir}/{value}"
    return value


def wrapper_script(launch: TaskLaunch, task_dir: str) -> bytes:
    """The wrapper for `launch` in `task_dir` (an absolute path on the host), as bytes."""
    q = shlex.quote
    environment = launch.environment
    # --env first, then the environment's lines (a venv's bin goes before the task's PATH).
    lines = [f"export {name}={q(task_env_value(name, value, task_dir))}"
             for name, value in launch.env]
    if environment is not None:
        lines += environment.exports(launch.gpu_uuids).splitlines()
    task_env = "\n".join(f"  {line}" for line in lines if line) or "  :"
    watchdog = ""
    if launch.timeout_s is not None:
        watchdog = _WATCHDOG.format(limit=_seconds(launch.timeout_s),
                                    grace=_seconds(launch.timeout_grace_s))
    cleanup = "" if environment is None else environment.cleanup(task_dir)
    text = _WRAPPER.format(
        task_id=launch.task_id,
        control=q(f"{task_dir}/{CONTROL_DIR}"),
        uuids=q(",".join(launch.gpu_uuids)),
        task_dir=q(task_dir),
        task_env=task_env,
        workdir=q(task_workdir(launch, task_dir)),
        watchdog=watchdog,
        sweep=_SWEEP,
        command=command_text(launch, task_dir),
        # Removing a container goes to the daemon its `run` reached: in the task's variables.
        cleanup=f"  in_task_env {cleanup} >/dev/null 2>&1" if cleanup else "",
    )
    # Arguments that were not valid UTF-8 on the controller travel as the same bytes.
    return text.encode("utf-8", "surrogateescape")


def make_task_dir_command(base: str, name: str) -> str:
    """mkdir a fresh private task directory `$HOME/<base>/<name>` (+ control dir); print it."""
    q = shlex.quote
    return (
        f"umask 077 && cd && mkdir -p {q(base)} && cd {q(base)} && mkdir -m 0700 {q(name)} "
        f"&& mkdir -m 0700 {q(name)}/{CONTROL_DIR} && cd {q(name)} && pwd -P"
    )


def launch_command(task_dir: str) -> str:
    """Start the wrapper detached from the SSH session; print the task's pgid once known."""
    control = shlex.quote(f"{task_dir}/{CONTROL_DIR}")
    return (
        f"c={control}; "
        # `setsid -f` forks without the shell's background job (which would ignore SIGINT); a
        # setsid without -f fails at once (usage, exit 1) and the job is the fallback.
        'setsid -f /bin/sh "$c/wrapper.sh" </dev/null >/dev/null 2>&1 || '
        '{ setsid /bin/sh "$c/wrapper.sh" </dev/null >/dev/null 2>&1 & }; '
        f'i=0; while [ ! -s "$c/pid" ] && [ ! -e "$c/exit" ] && [ "$i" -lt {PID_WAIT_STEPS} ]; '
        f'do sleep {PID_WAIT_STEP_S}; i=$((i+1)); done; cat "$c/pid" 2>/dev/null; true'
    )


def status_command(task_dir: str) -> str:
    """Print `key=value` lines: state (EXIT/RUNNING/STARTING/GONE), rc, ended, started, ..."""
    control = shlex.quote(f"{task_dir}/{CONTROL_DIR}")
    return (
        f"c={control}; "
        f'if [ -e "$c/exit" ]; then echo state={STATUS_EXIT}; cat "$c/exit"; '
        'elif p=$(cat "$c/pid" 2>/dev/null) && [ -n "$p" ] && kill -s 0 -- "-$p" 2>/dev/null; '
        f'then echo state={STATUS_RUNNING}; echo "pgid=$p"; '
        'elif w=$(cat "$c/wrapper.pid" 2>/dev/null) && [ -n "$w" ] && kill -0 "$w" 2>/dev/null; '
        f'then echo state={STATUS_STARTING}; '
        f'elif [ -d "$c" ]; then echo state={STATUS_GONE}; '
        f'else echo state={STATUS_GONE}; echo missing=1; fi; '
        'if [ -s "$c/started" ]; then echo "started=$(cat "$c/started")"; fi; '
        'if [ -e "$c/cancelled" ]; then echo cancelled=1; fi; true'
    )


def signal_command(task_dir: str, signal_name: str, *, mark_cancelled: bool) -> str:
    """Send `signal_name` (TERM/KILL) to the task's process group; print ALIVE or DEAD after."""
    if signal_name not in ("TERM", "KILL", "INT"):
        raise ValueError(f"unsupported signal {signal_name}")
    control = shlex.quote(f"{task_dir}/{CONTROL_DIR}")
    # The mark goes first, before the pid is read (see `cancelled` above); never on a task
    # that has ended, and never into a control directory that is not there.
    mark = ('if [ -d "$c" ] && [ ! -e "$c/exit" ]; then echo 1 > "$c/cancelled"; fi; '
            if mark_cancelled else "")
    return (
        f"c={control}; {mark}p=$(cat \"$c/pid\" 2>/dev/null); "
        "case $p in ''|*[!0-9]*) echo NOPID; exit 0 ;; esac; "
        f"kill -s {signal_name} -- \"-$p\" 2>/dev/null; "
        'if kill -s 0 -- "-$p" 2>/dev/null; then echo ALIVE; else echo DEAD; fi'
    )


def remove_dir_command(path: str) -> str:
    """rm -rf one fleet-owned directory (callers pass only paths fleet created)."""
    return f"rm -rf -- {shlex.quote(path)}"

"""Where a task runs on its host: a conda env, a virtual env or a container (`TaskEnvironment`).

One value, three kinds:
    venv       PATH (absolute, or `~/…` under the host user's home): PATH/bin first on PATH,
               VIRTUAL_ENV set; a `.py` script runs with PATH/bin/python
    conda      ENV (a name, or a prefix path when it contains '/'): `conda run -n ENV …`, with
               conda found on the host (PATH, $CONDA_EXE, ~/miniconda3, ~/anaconda3,
               ~/miniforge3, /opt/conda)
    container  IMAGE: the first runtime that works on the host, in this order: docker
               (`--gpus "device=UUID,…"`), podman (CDI `--device nvidia.com/gpu=UUID`),
               apptainer (`--nv`, CUDA_VISIBLE_DEVICES naming only the task's GPUs)

`check_command` runs on the host before anything is uploaded; it prints `tool=…` (conda's path,
the runtime's path, or the venv's absolute path) or a reason. The checked environment (`tool`
set) builds the wrapper's lines: `exports`, `command`, `cleanup`. Every value is shlex-quoted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from fleet.dispatch.spec import RESERVED_ENV
from fleet.errors import ConfigError

KINDS = ("venv", "conda", "container")
RUNTIMES = ("docker", "podman", "apptainer")
CONDA_PLACES = ("$HOME/miniconda3/bin/conda", "$HOME/anaconda3/bin/conda",
                "$HOME/miniforge3/bin/conda", "/opt/conda/bin/conda")
CHECK_EXIT = 3  # the check's exit status when the host cannot satisfy the environment
_MAX_VALUE = 1024


def host_path(path: str) -> str:
    """`path` as shell text for the host: `~/x` → "$HOME"/'x', anything else quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass(frozen=True)
class TaskEnvironment:
    """What a task runs inside; `tool` is set by the host check (never by a caller)."""

    kind: str
    value: str
    tool: str | None = None

    def __post_init__(self) -> None:
        option = f"--{self.kind}"
        if self.kind not in KINDS:
            raise ConfigError(f"unknown task environment {self.kind!r} (one of {', '.join(KINDS)})")
        value = self.value
        if not value or "\0" in value or "\n" in value or len(value) > _MAX_VALUE:
            raise ConfigError(f"{option}: give a non-empty value of at most {_MAX_VALUE} "
                              "characters, without NUL or newline")
        if value.startswith("-"):
            raise ConfigError(f"{option} {value!r}: a value cannot start with '-'")
        if self.kind == "venv" and not (value.startswith("/") or value == "~"
                                        or value.startswith("~/")):
            raise ConfigError(f"--venv {value!r}: give the environment's path on the host, "
                              "absolute or starting with ~/")
        if self.kind == "container" and any(char.isspace() for char in value):
            raise ConfigError(f"--container {value!r}: an image name has no spaces")

    @classmethod
    def from_options(cls, *, conda: str | None = None, venv: str | None = None,
                     container: str | None = None) -> TaskEnvironment | None:
        """The one environment asked for, None for none; ConfigError (exit 2) for several."""
        given = [(kind, value) for kind, value in
                 (("conda", conda), ("venv", venv), ("container", container)) if value is not None]
        if len(given) > 1:
            raise ConfigError(f"{' and '.join('--' + kind for kind, _ in given)} exclude each "
                              "other: a task runs in one environment")
        return cls(*given[0]) if given else None

    @classmethod
    def from_dict(cls, data: object) -> TaskEnvironment:
        """From `to_dict`'s kind and value (what a client sends); ConfigError if malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or \
                not isinstance(data.get("value"), str):
            raise ConfigError("environment: expected {kind, value} strings")
        return cls(data["kind"], data["value"])

    def to_dict(self) -> dict[str, str]:
        """The environment as the task's record keeps it (with the runtime once checked)."""
        data = {"kind": self.kind, "value": self.value}
        if self.tool is not None:
            data["tool"] = self.tool
            if self.kind == "container":
                data["runtime"] = PurePosixPath(self.tool).name
        return data

    @property
    def option(self) -> str:
        """The option as the user wrote it, for messages: `--venv /opt/env`."""
        return f"--{self.kind} {self.value}"

    @property
    def runtime(self) -> str | None:
        """The container runtime the check chose (docker, podman, apptainer), else None."""
        if self.kind != "container" or self.tool is None:
            return None
        return PurePosixPath(self.tool).name

    def python(self) -> str:
        """The interpreter for a `.py` script without --python, inside this environment."""
        if self.kind == "venv":
            return f"{self.tool or self.value}/bin/python"
        if self.kind == "conda":
            return "python"
        return "python3"  # an image's interpreter, found on its PATH

    # ---- the host check ------------------------------------------------------------------

    def check_command(self) -> str:
        """A sh program: prints `tool=…` and exits 0, or prints a reason and exits CHECK_EXIT."""
        fail = f"exit {CHECK_EXIT}"
        if self.kind == "venv":
            return (f"v={host_path(self.value)}; "
                    'if [ -x "$v/bin/python" ] && cd "$v" 2>/dev/null; then echo "tool=$(pwd)"; '
                    "else echo 'no virtual environment there (no executable bin/python)'; "
                    f"{fail}; fi")
        if self.kind == "conda":
            flag = "-p" if "/" in self.value else "-n"
            places = " ".join(CONDA_PLACES).replace("$HOME", '"$HOME"')
            return (f"e={host_path(self.value) if flag == '-p' else shlex.quote(self.value)}; "
                    'f=; for x in "$(command -v conda 2>/dev/null)" "${CONDA_EXE:-}" '
                    f'{places}; do if [ -n "$x" ] && [ -f "$x" ] && [ -x "$x" ]; '
                    'then f=$x; break; fi; done; '
                    'if [ -z "$f" ]; then echo "no conda found (looked on PATH, in \\$CONDA_EXE, '
                    '~/miniconda3, ~/anaconda3, ~/miniforge3 and /opt/conda)"; '
                    f"{fail}; fi; "
                    f'if "$f" run --no-capture-output {flag} "$e" true </dev/null >/dev/null 2>&1; '
                    'then echo "tool=$f"; '
                    'else echo "conda ($f) has no environment $e"; '
                    f"{fail}; fi")
        return _container_check()

    def checked(self, output: str) -> TaskEnvironment:
        """This environment with `tool` from a successful check's output (ValueError if none)."""
        for line in output.splitlines():
            if line.startswith("tool=") and line[5:].startswith("/"):
                return replace(self, tool=line[5:])
        raise ValueError(f"no tool= line in {output[-200:]!r}")

    # ---- the wrapper's lines (a checked environment) ------------------------------------

    def exports(self, gpu_uuids: tuple[str, ...]) -> str:
        """Shell lines that set the task's variables, after its --env ones (the wrapper runs
        them only where it starts the command, never for its own steps)."""
        if self.kind == "venv":
            return (f"export VIRTUAL_ENV={shlex.quote(self._tool())}\n"
                    'export PATH="$VIRTUAL_ENV/bin:$PATH"\nunset PYTHONHOME')
        if self.runtime == "apptainer":  # --nvccli setups read this one
            return f"export NVIDIA_VISIBLE_DEVICES={shlex.quote(','.join(gpu_uuids))}"
        return ""

    def command(self, argv: list[str], *, task_dir: str, gpu_uuids: tuple[str, ...],
                env_names: tuple[str, ...], own_workdir: bool) -> str:
        """The command as shell words: `argv` run inside the environment.

        The wrapper has already entered the work directory ("$PWD"); `own_workdir` says it is
        not the task directory (a container mounts it too).
        """
        q = shlex.quote
        words = [q(part) for part in argv]
        if self.kind == "venv":
            return " ".join(words)
        if self.kind == "conda":
            flag = "-p" if "/" in self.value else "-n"
            value = host_path(self.value) if flag == "-p" else q(self.value)
            return " ".join([q(self._tool()), "run", "--no-capture-output", flag, value, *words])
        mounts = [q(f"{task_dir}:{task_dir}")] + (['"$PWD:$PWD"'] if own_workdir else [])
        runtime = self.runtime
        if runtime == "apptainer":
            binds = [part for mount in mounts for part in ("--bind", mount)]
            return " ".join([q(self._tool()), "exec", "--nv", *binds, "--pwd", '"$PWD"',
                             q(apptainer_image(self.value)), *words])
        options = ["run", "--rm", "--name", q(container_name(task_dir)), "--network", "host",
                   "--ipc", "host", "-w", '"$PWD"']
        options += [part for mount in mounts for part in ("-v", mount)]
        # Variables go by name only: their values stay in the environment, off the command line.
        names = (*sorted(RESERVED_ENV), *env_names)
        options += [part for name in names for part in ("-e", q(name))]
        if runtime == "docker":
            options += ["--user", '"$(id -u):$(id -g)"']
            if gpu_uuids:  # docker's --gpus value is CSV: the quotes keep the commas in it
                options += ["--gpus", q(f'"device={",".join(gpu_uuids)}"')]
        else:
            options += [part for uuid in gpu_uuids for part in ("--device",
                                                                 q(f"nvidia.com/gpu={uuid}"))]
        return " ".join([q(self._tool()), *options, q(self.value), *words])

    def cleanup(self, task_dir: str) -> str:
        """A command (shell words) the wrapper runs after the command ended, in the task's
        variables as the run was, or "" for none: a killed docker/podman client leaves its
        container running, so remove it (nothing when it is gone already)."""
        if self.runtime in ("docker", "podman"):
            return f"{shlex.quote(self._tool())} rm -f {shlex.quote(container_name(task_dir))}"
        return ""

    def _tool(self) -> str:
        if self.tool is None:
            raise ValueError(f"{self.option}: not checked on the host yet")
        return self.tool


def container_name(task_dir: str) -> str:
    """`fleet-<task dir name>`: unique per task, so a cleanup removes only its own container."""
    return f"fleet-{PurePosixPath(task_dir).name}"


def apptainer_image(image: str) -> str:
    """An image as apptainer takes it: a URI or a file as given, a registry name as docker://."""
    if "://" in image or image.endswith(".sif") or image.startswith(("/", "./", "~")):
        return image
    return f"docker://{image}"


def _container_check() -> str:
    """The first working runtime among RUNTIMES, or why each one does not work."""
    probe = {"docker": '"$p" info', "podman": '"$p" info', "apptainer": '"$p" --version'}
    steps = []
    for runtime in RUNTIMES:
        steps.append(
            f'p=$(command -v {runtime} 2>/dev/null); '
            f'if [ -z "$p" ]; then why="$why; {runtime}: not installed"; '
            f'elif e=$($t {probe[runtime]} 2>&1 >/dev/null); then echo "tool=$p"; exit 0; '
            f'else why="$why; {runtime}: installed at $p but not working ('
            '$(printf %s "$e" | head -n 1 | cut -c1-200))"; fi')
    return ("why=; t=; if command -v timeout >/dev/null 2>&1; then t='timeout 20'; fi; "
            + "; ".join(steps)
            + f'; echo "no working container runtime:${{why#;}}"; exit {CHECK_EXIT}')

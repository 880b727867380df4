"""Builds the simulated libnvidia-ml.so.1 and fake nvidia-smi with gcc, cached by source hash.

Layout of one build: `<cache>/<hash>/lib/libnvidia-ml.so.1` and `<cache>/<hash>/bin/nvidia-smi`,
where `<cache>` is `$XDG_CACHE_HOME/fleet/sim` (default `~/.cache/fleet/sim`) and `<hash>` covers
the C sources, the compiler name and the flags. A build happens in a private temporary directory
that is renamed into place, so concurrent builders never see or leave a half-built directory:
the first rename wins and the others discard their copy.
"""

from __future__ import annotations

import errno
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import ConfigError, FleetError

SOURCE_DIR = Path(__file__).resolve().parent
LIBRARY_SOURCE = SOURCE_DIR / "libnvml.c"
NVIDIA_SMI_SOURCE = SOURCE_DIR / "nvidia_smi.c"
LIBRARY_NAME = "libnvidia-ml.so.1"
CONFIG_ENV = "FLEET_SIM_NVML_CONFIG"
COMPILE_TIMEOUT_S = 120.0

_COMMON_FLAGS = ("-O2", "-std=c11", "-Wall", "-Wextra")
_LIBRARY_FLAGS = ("-shared", "-fPIC", "-fvisibility=hidden", f"-Wl,-soname,{LIBRARY_NAME}")
# nvidia-smi finds the library next to it even without LD_LIBRARY_PATH.
_NVIDIA_SMI_FLAGS = ("-Wl,-rpath,$ORIGIN/../lib",)


@dataclass(frozen=True)
class SimTools:
    """A built simulated NVML library and the fake nvidia-smi linked against it."""

    lib_dir: Path  # holds libnvidia-ml.so.1
    nvidia_smi: Path  # executable named nvidia-smi

    @property
    def library(self) -> Path:
        """The shared library file itself."""
        return self.lib_dir / LIBRARY_NAME

    @property
    def bin_dir(self) -> Path:
        """The directory holding nvidia-smi, for PATH."""
        return self.nvidia_smi.parent

    def env(self, config_path: Path) -> dict[str, str]:
        """The two variables a process needs to see the simulated GPUs of `config_path`.

        Only these two (suitable for sshd's SetEnv); merge them into os.environ for a local
        subprocess.
        """
        return {"LD_LIBRARY_PATH": str(self.lib_dir), CONFIG_ENV: str(config_path.resolve())}


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/fleet/sim`, or `~/.cache/fleet/sim`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleet" / "sim"


def _compiler() -> str:
    return os.environ.get("CC") or "gcc"


def source_hash(compiler: str | None = None) -> str:
    """The cache key of a build: sources, compiler name, flags and machine architecture."""
    digest = hashlib.sha256()
    flags = (*_COMMON_FLAGS, *_LIBRARY_FLAGS, *_NVIDIA_SMI_FLAGS)
    for part in (compiler or _compiler(), platform.machine(), *flags):
        digest.update(part.encode() + b"\0")
    for source in (LIBRARY_SOURCE, NVIDIA_SMI_SOURCE):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _tools_in(build_dir: Path) -> SimTools:
    return SimTools(lib_dir=build_dir / "lib", nvidia_smi=build_dir / "bin" / "nvidia-smi")


def _is_complete(tools: SimTools) -> bool:
    return tools.library.is_file() and os.access(tools.nvidia_smi, os.X_OK)


def _run_compiler(command: list[str]) -> None:
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise FleetError(f"compiling the simulated NVML library timed out: {command}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot run the C compiler {command[0]!r}: {exc.strerror}") from exc
    if completed.returncode != 0:
        raise FleetError(
            f"compiling the simulated NVML library failed (exit {completed.returncode}): "
            f"{' '.join(command)}\n{completed.stderr.strip()}"
        )


def _compile_into(build_dir: Path, compiler: str) -> None:
    lib_dir = build_dir / "lib"
    bin_dir = build_dir / "bin"
    lib_dir.mkdir()
    bin_dir.mkdir()
    library = lib_dir / LIBRARY_NAME
    library_command = [compiler, *_COMMON_FLAGS, *_LIBRARY_FLAGS, "-o", str(library)]
    _run_compiler([*library_command, str(LIBRARY_SOURCE), "-lpthread"])
    nvidia_smi_command = [
        compiler,
        *_COMMON_FLAGS,
        *_NVIDIA_SMI_FLAGS,
        "-o",
        str(bin_dir / "nvidia-smi"),
    ]
    _run_compiler(
        [*nvidia_smi_command, str(NVIDIA_SMI_SOURCE), f"-L{lib_dir}", f"-l:{LIBRARY_NAME}"]
    )


def build_sim_tools(cache_dir: Path | None = None) -> SimTools:
    """The simulated NVML tools, compiled on first use and reused while the sources match.

    `cache_dir` replaces `$XDG_CACHE_HOME/fleet/sim`. Raises ConfigError when the compiler
    (`$CC`, default gcc) is missing and FleetError when compiling fails.
    """
    compiler = _compiler()
    root = (cache_dir or default_cache_dir()).resolve()
    final_dir = root / source_hash(compiler)
    tools = _tools_in(final_dir)
    if _is_complete(tools):
        return tools
    if shutil.which(compiler) is None:
        raise ConfigError(
            f"C compiler {compiler!r} not found on PATH: it is needed to build the simulated "
            "NVML library (Debian/Ubuntu: apt-get install gcc; or set CC)"
        )
    root.mkdir(parents=True, exist_ok=True)
    if final_dir.exists():
        if _is_complete(tools):
            return tools  # another builder renamed its build into place meanwhile
        # A rename always installs a complete build, so this one was damaged from outside.
        shutil.rmtree(final_dir, ignore_errors=True)
    building_dir = Path(tempfile.mkdtemp(prefix=f".building-{final_dir.name}-", dir=root))
    try:
        _compile_into(building_dir, compiler)
        try:
            building_dir.rename(final_dir)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise FleetError(f"cannot install the simulated NVML build: {exc}") from exc
            # Another builder finished first with identical sources; use its build.
    finally:
        shutil.rmtree(building_dir, ignore_errors=True)
    if not _is_complete(tools):
        raise FleetError(f"simulated NVML build in {final_dir} is incomplete")
    return tools

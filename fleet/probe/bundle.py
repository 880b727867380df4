"""Builds the self-contained probe program (trimmed pynvml + remote.py) and its command line."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import shlex
import zlib
from pathlib import Path

from fleet.errors import FleetError

log = logging.getLogger(__name__)

DEFAULT_TASKS_DIR = "~/.fleet/tasks"
REMOTE_SOURCE_PATH = Path(__file__).with_name("remote.py")
TRIM_SOURCE_PATH = Path(__file__).with_name("trim.py")  # part of the trimmed module's cache key
# The probe's own modules, installed on a host in this order under these names (remote.py
# finds the other two by them: see its _beside).
PROBE_MODULES = (
    ("fleet_probe_proc", REMOTE_SOURCE_PATH.with_name("remote_proc.py")),
    ("fleet_probe_cli", REMOTE_SOURCE_PATH.with_name("remote_cli.py")),
    ("fleet_probe_remote", REMOTE_SOURCE_PATH),
)
PYTHON_TOO_OLD_EXIT = 97  # the bootstrap's exit status on a Python older than 3.6

# Runs on the host as `python3 -c BOOTSTRAP`: reads one length-prefixed zlib payload from stdin
# and executes its program part. Reading exactly that many bytes (instead of `python3 -` reading
# to end of file) leaves stdin open, so a streaming probe notices a closed SSH channel as end of
# file. The payload is the program, a NUL, then the modules' sources as data (_fleet_data): only
# the program is parsed; a source is compiled only when the host has no cached code for it
# (compiling the sources as string literals cost every probe ~1.2 ms of host CPU). The program
# runs through exec(bytes), not compile(): the compile builtin builds the interpreter's 120-odd
# AST classes on its first call (7 M instructions, a tenth of a probe); exec of source does not.
BOOTSTRAP = (
    "import sys,zlib;"
    "sys.version_info<(3,6)and("
    'sys.stderr.write("fleet-probe: needs python>=3.6, this is %s\\n"%sys.version.split()[0]),'
    f"sys.exit({PYTHON_TOO_OLD_EXIT}));"
    "r=sys.stdin.buffer;n=int(r.readline());"
    "d=zlib.decompress(r.read(n));i=d.index(0);_fleet_data=d[i+1:];"
    "exec(d[:i])"
)
PAYLOAD_SEPARATOR = "\0"

# The payload: loads the probe, installs the shipped pynvml as a module, runs the probe's main().
_PAYLOAD_TEMPLATE = """\
import sys, types

def _fleet_code(name, start, end, key):
    # Compiling pynvml costs 60-90 ms per probe; the code object is cached on the host, keyed
    # by the source's hash (computed by the controller: no hashlib import here) and the exact
    # interpreter (cache tag and version), in a 0700 directory of the user's own cache
    # (nothing is installed; a missing or unwritable cache only costs time).
    import marshal, os
    filename = "<fleet-probe>/" + name + ".py"
    interpreter = "%s-%x" % (sys.implementation.cache_tag, sys.hexversion)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "fleet", "probe", "%s-%s-%s.code" % (name, key, interpreter))
    code = None
    try:
        info = os.stat(path)
        if info.st_uid == os.getuid() and not info.st_mode & 0o022:
            with open(path, "rb") as cached:
                code = marshal.loads(cached.read())
    except (OSError, ValueError, EOFError, TypeError):
        code = None  # no usable cache entry: compile it
    if code is not None:
        return code
    code = compile(_fleet_data[start:end], filename, "exec")  # the source, as UTF-8 bytes
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        partial = path + ".%d.tmp" % os.getpid()
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(marshal.dumps(code))
        os.replace(partial, path)
    except OSError as exc:
        sys.stderr.write("fleet-probe: code cache not written: %s\\n" % exc)
    return code

def _fleet_install(name, start, end, key):
    module = types.ModuleType(name)
    module.__file__ = "<fleet-probe>/" + name + ".py"
    sys.modules[name] = module
    exec(_fleet_code(name, start, end, key), module.__dict__)
    return module

{installs}
_fleet_probe = sys.modules["fleet_probe_remote"]
_fleet_cpu_before = _fleet_probe.cpu_mark()  # CPU busy is measured across pynvml's compile
{install_pynvml}
# Exits without the interpreter's teardown (fleet_probe_cli.exit_now: ~4 ms of host CPU).
sys.modules["fleet_probe_cli"].exit_now(_fleet_probe.main({args}, _fleet_cpu_before))
"""


class BundleError(FleetError):
    """The probe program could not be built (pynvml missing on the controller, bad arguments)."""


def pynvml_source_path() -> Path:
    """Where the controller's installed nvidia-ml-py keeps pynvml.py (found, not imported)."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise BundleError("nvidia-ml-py (module pynvml) is not installed on the controller")
    return Path(spec.origin)


def full_pynvml_source() -> str:
    """The installed nvidia-ml-py's pynvml.py, whole (what the trimmed module is cut from)."""
    return pynvml_source_path().read_text(encoding="utf-8")


def _read_private(path: Path) -> str | None:
    """The text of a file of this user's that nobody else can write (so safe to ship to
    hosts), or None where there is no such file."""
    try:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _trimmed_pynvml(full: str, probe: str) -> str:
    """trim_pynvml(full, probe), `probe` being the source of every probe module, cached in the
    controller's user cache: trimming parses the whole binding (~0.1-0.4 s), which every
    process that probes would pay otherwise."""
    key = hashlib.sha256()
    for part in (full, probe, TRIM_SOURCE_PATH.read_text(encoding="utf-8")):
        key.update(hashlib.sha256(part.encode("utf-8")).digest())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "fleet" / "bundle" / f"pynvml-{key.hexdigest()[:24]}.py"
    cached = _read_private(path)
    if cached is not None:
        return cached
    from fleet.probe import trim  # only here: a cache hit needs neither it nor its imports

    trimmed = trim.trim_pynvml(full, probe)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(trimmed, encoding="utf-8")
        partial.chmod(0o600)
        os.replace(partial, path)
    except OSError as exc:
        log.debug("trimmed pynvml not cached at %s: %s", path, exc)
    return trimmed


@functools.lru_cache(maxsize=1)
def _sources() -> tuple[str, tuple[tuple[str, str], ...]]:
    """(pynvml as shipped: trimmed to what the probe's modules use, (name, source) of each of
    those modules in PROBE_MODULES' order)."""
    modules = tuple((name, path.read_text(encoding="utf-8")) for name, path in PROBE_MODULES)
    used = "\n".join(source for _, source in modules)
    return _trimmed_pynvml(full_pynvml_source(), used), modules


def shipped_pynvml_source() -> str:
    """The pynvml source the probe program carries (trimmed)."""
    return _sources()[0]


def probe_arguments(
    mode: str, interval: float | None, tasks_dir: str, max_samples: int | None = None
) -> list[str]:
    """The remote probe's command line arguments for a mode ("once" or "stream")."""
    if mode == "once":
        if interval is not None:
            raise BundleError("probe mode 'once' takes no interval")
        arguments = ["--once"]
    elif mode == "stream":
        if interval is None or not interval > 0:
            raise BundleError(f"probe mode 'stream' needs an interval > 0, got {interval!r}")
        arguments = ["--interval", repr(float(interval))]
    else:
        raise BundleError(f"unknown probe mode {mode!r} (expected 'once' or 'stream')")
    if max_samples is not None:
        if max_samples < 1:
            raise BundleError(f"max_samples must be >= 1, got {max_samples}")
        arguments += ["--max-samples", str(max_samples)]
    return [*arguments, "--tasks-dir", tasks_dir]


def payload_source(arguments: list[str], pynvml_source: str | None = None) -> str:
    """What the bootstrap decompresses, as text: the program it compiles and runs (for the given
    probe arguments), PAYLOAD_SEPARATOR, then the sources the program installs (each module's,
    then pynvml's), which it reads by byte offset. `pynvml_source` replaces the shipped
    (trimmed) pynvml, e.g. by the whole binding."""
    shipped, modules = _sources()
    pynvml_shipped = shipped if pynvml_source is None else pynvml_source
    installed = [*modules, ("pynvml", pynvml_shipped)]  # in the order the data holds them
    calls: list[str] = []
    offset = 0
    for name, source in installed:
        end = offset + len(source.encode("utf-8"))
        calls.append(f"_fleet_install({name!r}, {offset}, {end}, {_code_cache_key(source)!r})")
        offset = end
    program = _PAYLOAD_TEMPLATE.format(
        installs="\n".join(calls[:-1]), install_pynvml=calls[-1], args=json.dumps(arguments))
    return program + PAYLOAD_SEPARATOR + "".join(source for _, source in installed)


def _code_cache_key(source: str) -> str:
    """The key of a source's compiled code in the hosts' code cache (the payload's
    _fleet_code adds the interpreter)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:24]


def encode_program(source: str) -> bytes:
    """A payload source as the bootstrap reads it on stdin: a length line, then zlib data."""
    # Level 6: 0.4 % larger than level 9 (14.1 kB) for a quarter of its CPU (1.3 ms, not 4.8
    # ms, in every process that probes); the host decompresses either as fast.
    compressed = zlib.compress(source.encode("utf-8"), 6)
    return b"%d\n" % len(compressed) + compressed


@functools.lru_cache(maxsize=64)
def probe_program(
    mode: str,
    interval: float | None,
    tasks_dir: str = DEFAULT_TASKS_DIR,
    max_samples: int | None = None,
) -> bytes:
    """The bytes to write to the stdin of probe_command(): a length line, then zlib payload."""
    return encode_program(payload_source(probe_arguments(mode, interval, tasks_dir, max_samples)))


def probe_command(python: str = "python3") -> str:
    """The shell command line that runs the probe program fed on its stdin (`-S`: the probe
    needs only the standard library, and the site module's .pth files cost a host
    milliseconds per probe)."""
    return f"exec {shlex.quote(python)} -S -c {shlex.quote(BOOTSTRAP)}"


def program_digest() -> str:
    """A short content hash of what the probe ships (pynvml + its own modules), for logs and
    caches."""
    pynvml_source, modules = _sources()
    digest = hashlib.sha256()
    for source in (pynvml_source, *(source for _, source in modules)):
        digest.update(source.encode("utf-8"))
    return digest.hexdigest()[:16]

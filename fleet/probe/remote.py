"""Host-side probe: reads NVML and /proc and prints JSON lines (runs on the host's python3 >= 3.6)."""

# This file is sent to hosts as source and must stay Python 3.6 syntax and stdlib only
# (tests check it with ast.parse(feature_version=(3, 6))). The controller also imports it to
# probe its own machine in-process, so everything below the imports is importable and the
# command line entry point is main(argv). Its host readers and its command line live in
# remote_proc.py and remote_cli.py, shipped beside it.

import os
import sys
import time

try:
    # The C module the signal package wraps: importing `signal` builds its enum classes, 0.8 ms
    # of host CPU per probe, and the probe only installs three handlers by number.
    import _signal as signals
except ImportError:  # an interpreter without it (not CPython)
    import signal as signals


def _beside(name):
    """remote_NAME.py: on a host the bundle installs it as fleet_probe_NAME before this module
    (so no package is looked up there); imported by the controller, fleet.probe.remote_NAME."""
    module = sys.modules.get("fleet_probe_" + name)
    if module is None:
        import importlib

        module = importlib.import_module("fleet.probe.remote_" + name)
    return module


_proc = _beside("proc")
_cli = _beside("cli")
cpu_mark = _proc.cpu_mark  # the bundle takes the first CPU mark through this module
parse_args = _cli.parse_args

# Imported on first use (NvmlSession.start): the bundle installs pynvml after this module so
# the first CPU-time reading can be taken before pynvml is compiled.
pynvml = None
PYNVML_IMPORT_ERROR = None

SCHEMA_VERSION = 1
DEFAULT_TASKS_DIR = _cli.DEFAULT_TASKS_DIR
CPU_GAP_SECONDS = 0.1
PSTATE_UNKNOWN = 32

# NVML errors that just mean "this field does not exist here": reported as null, no warning.
_QUIET_NVML_ERRORS = ("NotSupported", "FunctionNotFound", "NotFound", "NoData")


class GpuLost(Exception):
    """Raised inside a GPU reading when NVML says the GPU is lost; stops that GPU's reading."""


_nvml_error_kinds = None  # {NVML error code: kind}, made on the first NVML error


def _nvml_error_name(error):
    """The error's kind as pynvml's error-class factory names its class, from the error's code
    (NVML_ERROR_GPU_IS_LOST: GpuIsLost); for a code pynvml does not list, its base class's name.
    Read from the code, not the class: the binding the bundle ships leaves that factory out
    (fleet.probe.trim.SKIPPED_CALLS), and its `import string` with it."""
    global _nvml_error_kinds
    if _nvml_error_kinds is None:
        kinds = {}
        for name in dir(pynvml):  # sorted, as the factory reads them: a code's last name wins
            if name.startswith("NVML_ERROR_"):
                words = name[len("NVML_ERROR_"):].split("_")
                kinds[getattr(pynvml, name)] = "".join(word.capitalize() for word in words)
        _nvml_error_kinds = kinds
    kind = _nvml_error_kinds.get(getattr(error, "value", None))
    return kind if kind is not None else type(error).__name__.replace("NVMLError_", "")


def _is_nvml_error(error):
    return pynvml is not None and isinstance(error, pynvml.NVMLError)


def _describe_nvml_error(error):
    code = getattr(error, "value", None)
    try:
        text = str(error)
    except Exception:  # str() of an NVMLError calls into the library, which may be gone
        text = _nvml_error_name(error)
    if code is None:
        return text
    return "%s (NVML code %s)" % (text, code)


class Reader(object):
    """Calls NVML functions one field at a time, turning failures into null plus a warning."""

    def __init__(self, warnings, where):
        self.warnings = warnings
        self.where = where

    def call(self, name, function, *args, **kwargs):
        """The function's result, or None when it fails; raises GpuLost for a lost GPU."""
        try:
            return function(*args, **kwargs)
        except Exception as error:
            return self.failed(name, error)

    def failed(self, name, error):
        """Account for a failed read: None (plus a warning unless merely unsupported)."""
        if _is_nvml_error(error):
            kind = _nvml_error_name(error)
            if kind == "GpuIsLost":
                raise GpuLost("%s: %s" % (name, _describe_nvml_error(error)))
            if kind not in _QUIET_NVML_ERRORS:
                self.warnings.append("%s: %s: %s" % (self.where, name, _describe_nvml_error(error)))
            return None
        self.warnings.append("%s: %s: %s: %s" % (self.where, name, type(error).__name__, error))
        return None


def _text(value):
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _watts(milliwatts):
    return None if milliwatts is None else milliwatts / 1000.0


def _read_memory(reader, handle):
    """(total, used) bytes; NVML's v2 struct when available (used excludes reserved memory)."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(info.total), int(info.used)
        except TypeError:
            pass  # an old pynvml without the version argument: use v1 below
        except Exception as error:
            if not (_is_nvml_error(error) and _nvml_error_name(error) in _QUIET_NVML_ERRORS):
                reader.failed("nvmlDeviceGetMemoryInfo_v2", error)
    info = reader.call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    if info is None:
        return None, None
    return int(info.total), int(info.used)


def _read_processes(reader, handle):
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3",
                 "nvmlDeviceGetComputeRunningProcesses_v2"):
        function = getattr(pynvml, name, None)
        if function is None:
            continue
        try:
            found = function(handle)
        except Exception as error:
            if _is_nvml_error(error) and _nvml_error_name(error) == "FunctionNotFound":
                continue  # an older driver: try the previous struct version
            found = reader.failed(name, error)
        if found is None:
            return []
        processes = []
        for process in found:
            pid = int(process.pid)
            used = process.usedGpuMemory
            uid = _proc.process_uid(pid)
            processes.append({
                "pid": pid,
                "used_memory_bytes": None if used is None else int(used),
                "name": _proc.process_name(pid),
                "uid": uid,
                "user": _proc.user_name(uid),
                "session": _proc.process_session(pid),
            })
        return processes
    return []


def read_gpu(index, warnings):
    """One GPU's reading as a dict with GpuReport's field names; never raises for NVML errors."""
    gpu = {"index": index, "lost": False, "error": None, "processes": []}
    reader = Reader(warnings, "gpu %d" % index)
    try:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as error:
            if not _is_nvml_error(error):
                raise
            gpu["lost"] = True
            gpu["error"] = "nvmlDeviceGetHandleByIndex: " + _describe_nvml_error(error)
            return gpu
        gpu["uuid"] = _text(reader.call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
        gpu["name"] = _text(reader.call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
        pci = reader.call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo_v3, handle)
        gpu["pci_bus_id"] = None if pci is None else _text(pci.busId)
        total, used = _read_memory(reader, handle)
        gpu["memory_total_bytes"] = total
        gpu["memory_used_bytes"] = used
        rates = reader.call("nvmlDeviceGetUtilizationRates",
                            pynvml.nvmlDeviceGetUtilizationRates, handle)
        gpu["utilization_gpu_pct"] = None if rates is None else rates.gpu
        gpu["utilization_memory_pct"] = None if rates is None else rates.memory
        gpu["temperature_c"] = reader.call("nvmlDeviceGetTemperature",
                                           pynvml.nvmlDeviceGetTemperature,
                                           handle, pynvml.NVML_TEMPERATURE_GPU)
        gpu["power_draw_w"] = _watts(reader.call("nvmlDeviceGetPowerUsage",
                                                 pynvml.nvmlDeviceGetPowerUsage, handle))
        gpu["power_limit_w"] = _watts(reader.call("nvmlDeviceGetEnforcedPowerLimit",
                                                  pynvml.nvmlDeviceGetEnforcedPowerLimit, handle))
        gpu["fan_speed_pct"] = reader.call("nvmlDeviceGetFanSpeed",
                                           pynvml.nvmlDeviceGetFanSpeed, handle)
        pstate = reader.call("nvmlDeviceGetPerformanceState",
                             pynvml.nvmlDeviceGetPerformanceState, handle)
        gpu["performance_state"] = None if pstate in (None, PSTATE_UNKNOWN) else int(pstate)
        gpu["clock_sm_mhz"] = reader.call("nvmlDeviceGetClockInfo(SM)",
                                          pynvml.nvmlDeviceGetClockInfo,
                                          handle, pynvml.NVML_CLOCK_SM)
        gpu["clock_mem_mhz"] = reader.call("nvmlDeviceGetClockInfo(MEM)",
                                           pynvml.nvmlDeviceGetClockInfo,
                                           handle, pynvml.NVML_CLOCK_MEM)
        gpu["ecc_errors_corrected"] = reader.call(
            "nvmlDeviceGetTotalEccErrors(corrected)", pynvml.nvmlDeviceGetTotalEccErrors,
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
        gpu["ecc_errors_uncorrected"] = reader.call(
            "nvmlDeviceGetTotalEccErrors(uncorrected)", pynvml.nvmlDeviceGetTotalEccErrors,
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        pending = reader.call("nvmlDeviceGetRetiredPagesPendingStatus",
                              pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        gpu["retired_pages_pending"] = None if pending is None else bool(pending)
        gpu["processes"] = _read_processes(reader, handle)
    except GpuLost as lost:
        gpu["lost"] = True
        gpu["error"] = "GPU is lost (%s)" % lost
    return gpu


def _cuda_version_text(version):
    if version is None:
        return None
    return "%d.%d" % (version // 1000, (version % 1000) // 10)


def read_host(session, tasks_dir, cpu_busy, warnings):
    """Host facts as a dict with HostReport's field names (NVML's versions added here)."""
    host = _proc.host_facts(tasks_dir, cpu_busy, warnings)
    if session.ready:
        reader = Reader(warnings, "host")
        try:
            host["driver_version"] = _text(reader.call(
                "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))
            cuda = getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None)
            version = None if cuda is None else reader.call(
                "nvmlSystemGetCudaDriverVersion_v2", cuda)
            if version is None:
                version = reader.call("nvmlSystemGetCudaDriverVersion",
                                      pynvml.nvmlSystemGetCudaDriverVersion)
            host["cuda_driver_version"] = _cuda_version_text(version)
            host["nvml_version"] = _text(reader.call(
                "nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion))
        except GpuLost as lost:
            warnings.append("host: %s" % lost)
    return host


def _load_pynvml():
    """True once pynvml is importable (the bundle ships it; a bare run may lack it)."""
    global pynvml, PYNVML_IMPORT_ERROR
    if pynvml is None:
        try:
            import pynvml as module
        except ImportError as exc:
            PYNVML_IMPORT_ERROR = str(exc)
            return False
        pynvml = module
    return True


class NvmlSession(object):
    """NVML initialised once (per probe process, or per in-process reading); why not, if not."""

    def __init__(self):
        self.ready = False
        self.reason = None

    def start(self):
        if not _load_pynvml():
            self.reason = "pynvml is not available: %s" % PYNVML_IMPORT_ERROR
            return self
        try:
            pynvml.nvmlInit()
            self.ready = True
        except Exception as error:
            if not _is_nvml_error(error):
                raise
            self.reason = "NVML could not be initialised: %s" % _describe_nvml_error(error)
        return self

    def stop(self):
        if self.ready:
            self.ready = False
            try:
                pynvml.nvmlShutdown()
            except Exception as error:
                if not _is_nvml_error(error):
                    raise
                sys.stderr.write("fleet-probe: nvmlShutdown: %s\n" % _describe_nvml_error(error))

    def read_gpus(self, warnings):
        """(gpus, reason): every GPU's reading, or none and why."""
        if not self.ready:
            return [], self.reason
        try:
            count = pynvml.nvmlDeviceGetCount()
        except Exception as error:
            if not _is_nvml_error(error):
                raise
            return [], "nvmlDeviceGetCount failed: %s" % _describe_nvml_error(error)
        return [read_gpu(index, warnings) for index in range(count)], None


def read_sample(session, tasks_dir, cpu_before, wait=time.sleep):
    """One complete reading in the probe's JSON line schema, and the CPU mark it ended with.

    CPU busy % covers cpu_before until after the GPUs were read, at least CPU_GAP_SECONDS
    (`wait` sleeps the rest), so NVML's own start-up time overlaps the measuring gap.
    """
    warnings = []
    gpus, reason = session.read_gpus(warnings)
    remaining = CPU_GAP_SECONDS - (time.monotonic() - cpu_before[0])
    if remaining > 0:
        wait(remaining)
    cpu_after = _proc.cpu_mark()
    host = read_host(session, tasks_dir, _proc.cpu_busy_pct(cpu_before, cpu_after), warnings)
    sample = {
        "schema": SCHEMA_VERSION,
        "ts": time.time(),
        "method": "nvml",
        "host": host,
        "gpus": gpus,
        "gpu_reason": reason,
        "warnings": warnings,
    }
    return sample, cpu_after


def read_once(tasks_dir=DEFAULT_TASKS_DIR, cpu_before=None):
    """A single reading with its own NVML session (used by the controller for local hosts too)."""
    if cpu_before is None:
        cpu_before = _proc.cpu_mark()
    session = NvmlSession().start()
    try:
        return read_sample(session, tasks_dir, cpu_before)[0]
    finally:
        session.stop()


def stream(interval, max_samples, tasks_dir, out, stdin_fd, cpu_before=None):
    """Print one line per interval until stdin closes, a signal arrives, or max_samples lines."""
    if cpu_before is None:
        cpu_before = _proc.cpu_mark()
    session = NvmlSession().start()

    def wait(seconds):
        _cli.wait_or_stdin_closed(seconds, stdin_fd)

    try:
        emitted = 0
        next_due = time.monotonic()
        while max_samples is None or emitted < max_samples:
            sample, cpu_before = read_sample(session, tasks_dir, cpu_before, wait)
            _cli.emit(sample, out)
            emitted += 1
            if max_samples is not None and emitted >= max_samples:
                break
            next_due += interval
            now = time.monotonic()
            if next_due < now:  # a slow reading: skip missed ticks rather than burst
                next_due = now
            wait(next_due - now)
    finally:
        session.stop()


def main(argv, cpu_before=None):
    """Command line entry point; returns the exit status.

    cpu_before: a cpu_mark() taken earlier by the caller (the bundle takes it before compiling
    pynvml), so the CPU busy measurement overlaps start-up instead of adding a sleep.
    """
    try:
        args = parse_args(argv)
    except _cli.UsageError as error:
        sys.stderr.write("%s\nfleet-probe: error: %s\n" % (_cli.USAGE, error))
        return 2
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        signals.signal(getattr(signals, name), _cli.on_signal)
    out = sys.stdout
    try:
        if args.once:
            _cli.emit(read_once(args.tasks_dir, cpu_before), out)
        else:
            stream(args.interval, args.max_samples, args.tasks_dir, out, _cli.stdin_fd(), cpu_before)
    except _cli.Stop as stop:
        sys.stderr.write("fleet-probe: stopping: %s\n" % stop)
    except BrokenPipeError:
        # the reader went away (SSH channel closed): nothing more to say to anyone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The probe's host readers: processes, CPU busy time, memory, disk and network from /proc."""

# Shipped to hosts beside remote.py (the bundle installs it as fleet_probe_proc) and imported by the
# controller as fleet.probe.remote_proc: Python 3.6 syntax and stdlib only, like remote.py.

import os
import sys
import time

def process_name(pid):
    try:
        with open("/proc/%d/comm" % pid, "rb") as comm:
            return comm.read(256).decode("utf-8", "replace").strip() or None
    except (OSError, ValueError):
        return None  # gone, in another pid namespace, or not ours to read


def process_uid(pid):
    """The real uid of a process (None: gone, in another pid namespace, or not ours to read)."""
    try:
        with open("/proc/%d/status" % pid, "rb") as status:
            for line in status.read(8192).decode("ascii", "replace").splitlines():
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_session(pid):
    """The session id of a process (fields after "(comm)": state ppid pgrp session ...)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as stat:
            fields = stat.read(4096).decode("ascii", "replace").rpartition(")")[2].split()
        return int(fields[3])
    except (OSError, ValueError, IndexError):
        return None


def user_name(uid):
    """The host's name for `uid` (None when it has none)."""
    if uid is None:
        return None
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def _read_first_line(path):
    with open(path) as source:
        return source.readline()


def read_cpu_times():
    """(busy, total) jiffies from /proc/stat's aggregate line, or None where unreadable."""
    try:
        fields = _read_first_line("/proc/stat").split()
        if not fields or fields[0] != "cpu":
            return None
        values = [int(value) for value in fields[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    # guest time is already included in user/nice, so only the first 8 fields count
    total = sum(values[:8])
    return total - idle, total


def cpu_mark():
    """(monotonic time, read_cpu_times()): one end of a CPU busy measurement."""
    return time.monotonic(), read_cpu_times()


def cpu_busy_pct(before, after):
    """Busy share of CPU time between two cpu_mark() results, or None."""
    if before[1] is None or after[1] is None:
        return None
    busy = after[1][0] - before[1][0]
    total = after[1][1] - before[1][1]
    if total <= 0:
        return None
    return round(100.0 * min(max(busy, 0), total) / total, 1)


def read_meminfo():
    values = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("MemTotal:", "MemAvailable:"):
                values[parts[0]] = int(parts[1]) * 1024
    return values.get("MemTotal:"), values.get("MemAvailable:")


def existing_dir(path):
    """path itself if it exists, else its nearest existing parent."""
    path = os.path.abspath(os.path.expanduser(path))
    for _ in range(256):
        if os.path.exists(path):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_usage(path):
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def read_net():
    rx_total = 0
    tx_total = 0
    with open("/proc/net/dev") as netdev:
        for line in netdev:
            if ":" not in line:
                continue
            name, counters = line.split(":", 1)
            if name.strip() == "lo":
                continue
            fields = counters.split()
            if len(fields) >= 9:
                rx_total += int(fields[0])
                tx_total += int(fields[8])
    return rx_total, tx_total


def _guarded(warnings, what, function, *args):
    try:
        return function(*args)
    except (OSError, ValueError, IndexError) as error:
        warnings.append("host: %s: %s" % (what, error))
        return None


def host_facts(tasks_dir, cpu_busy, warnings):
    """Host facts from the OS, as a dict with HostReport's field names (NVML's versions None:
    remote.read_host fills them); each unreadable fact is None and a warning."""
    host = {
        "hostname": _guarded(warnings, "hostname", lambda: os.uname().nodename),
        "kernel": os.uname().release,
        "cpu_count": os.cpu_count(),
        "cpu_busy_pct": cpu_busy,
        "python_version": "%d.%d.%d" % tuple(sys.version_info[:3]),
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
    }
    load = _guarded(warnings, "loadavg", os.getloadavg)
    host["load_1m"], host["load_5m"], host["load_15m"] = load if load else (None, None, None)
    memory = _guarded(warnings, "/proc/meminfo", read_meminfo)
    host["memory_total_bytes"], host["memory_available_bytes"] = memory or (None, None)
    root = _guarded(warnings, "statvfs /", disk_usage, "/")
    host["disk_root_total_bytes"], host["disk_root_free_bytes"] = root or (None, None)
    tasks = _guarded(warnings, "statvfs tasks dir", disk_usage, existing_dir(tasks_dir))
    host["disk_tasks_total_bytes"], host["disk_tasks_free_bytes"] = tasks or (None, None)
    net = _guarded(warnings, "/proc/net/dev", read_net)
    host["net_rx_bytes"], host["net_tx_bytes"] = net or (None, None)
    return host

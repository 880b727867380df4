"""The host-side code cache of the probe: reused, private, and never trusted when tampered with."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from fleet.probe.bundle import BOOTSTRAP, probe_program


def _run_probe(cache_home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "LD_LIBRARY_PATH": "/nonexistent"}
    return subprocess.run([sys.executable, "-c", BOOTSTRAP], input=probe_program("once", None),
                          env=env, capture_output=True, timeout=60, check=False)


def test_compiled_code_is_cached_privately_and_reused(tmp_path: Path) -> None:
    first = _run_probe(tmp_path)
    assert first.returncode == 0, first.stderr
    cache_dir = tmp_path / "fleet" / "probe"
    entries = sorted(cache_dir.glob("*.code"))
    assert [entry.name.split("-")[0] for entry in entries] == [
        "fleet_probe_cli", "fleet_probe_proc", "fleet_probe_remote", "pynvml"]
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    assert all(entry.stat().st_mode & 0o777 == 0o600 for entry in entries)
    stamps = [entry.stat().st_mtime_ns for entry in entries]

    second = _run_probe(tmp_path)

    assert second.returncode == 0, second.stderr
    assert [entry.stat().st_mtime_ns for entry in entries] == stamps  # read, not rewritten
    assert json.loads(second.stdout)["schema"] == 1


def test_corrupt_or_group_writable_cache_entries_are_not_used(tmp_path: Path) -> None:
    assert _run_probe(tmp_path).returncode == 0
    entries = {entry.name.split("-")[0]: entry
               for entry in (tmp_path / "fleet" / "probe").glob("*.code")}
    remote_entry, pynvml_entry = entries["fleet_probe_remote"], entries["pynvml"]
    pynvml_entry.write_bytes(b"not marshal data")
    hostile = compile("import sys; sys.stdout.write('PWNED'); sys.exit(0)", "<x>", "exec")
    remote_entry.write_bytes(marshal.dumps(hostile))
    remote_entry.chmod(0o666)

    result = _run_probe(tmp_path)

    assert result.returncode == 0, result.stderr
    assert b"PWNED" not in result.stdout
    assert json.loads(result.stdout)["gpus"] == []
    assert marshal.loads(pynvml_entry.read_bytes()) is not None  # recompiled and rewritten

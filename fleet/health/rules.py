"""Health rules: turn each host's probe outcome into GPU state changes and fact-change events.

Pure: no I/O, no clock. The monitor feeds `HealthTracker.observe` one outcome per host per
interval and applies the returned `HealthChange`s (see fleet.health.apply).

GPU states, worst first: failed (lost, NVML error on the device, or no longer listed) >
degraded (uncorrectable ECC errors, pending retired pages) > hot (temperature at or above
`gpu_hot_c`, until it falls below `gpu_cool_c`) > ok. Host: the tracker counts consecutive failed
outcomes (`failures`) and keeps the state fleet.health.host_state's rule gives (`host_state`,
the live view); the monitor records each outcome with that count (record_host_outcome), which
decides the stored state and its events against what the database holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from db.types import Severity
from fleet.health.changes import HealthChange
from fleet.health.host_state import host_transition, known_state
from fleet.model import HostOutcome, HostState
from fleet.reports import GpuReport, ProbeReport

__all__ = ["GpuSeed", "HealthChange", "HealthSettings", "HealthTracker", "HostSeed"]

GPU_OK = "ok"
GPU_HOT = "hot"
GPU_DEGRADED = "degraded"
GPU_FAILED = "failed"

# Event kind and severity for a GPU entering each state (entering "ok" depends on where from).
_GPU_STATE_EVENTS: dict[str, tuple[str, Severity]] = {
    GPU_HOT: ("gpu_hot", "warning"),
    GPU_DEGRADED: ("gpu_degraded", "warning"),
    GPU_FAILED: ("gpu_failed", "error"),
}


@dataclass(frozen=True)
class HealthSettings:
    """Thresholds of the health rules (the `health:` settings section)."""

    gpu_hot_c: float = 85.0
    gpu_cool_c: float = 80.0
    host_down_after: int = 3
    ecc_uncorrected_degrades: bool = True
    retired_pages_degrade: bool = True
    fact_change_events: bool = True

    def __post_init__(self) -> None:
        if not self.gpu_cool_c < self.gpu_hot_c:
            raise ValueError(
                f"gpu_cool_c ({self.gpu_cool_c:g}) must be below gpu_hot_c ({self.gpu_hot_c:g})"
            )
        if self.host_down_after < 1:
            raise ValueError(f"host_down_after must be at least 1, not {self.host_down_after}")


@dataclass(frozen=True)
class GpuSeed:
    """A GPU's stored state and facts, to start the tracker where the database left off."""

    index: int
    state: str = GPU_OK
    name: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class HostSeed:
    """A host's stored state and facts, to start the tracker where the database left off."""

    host: str
    state: str = "unknown"
    gpu_count: int | None = None
    driver_version: str | None = None
    gpus: tuple[GpuSeed, ...] = ()


@dataclass
class _GpuMemory:
    state: str = GPU_OK
    hot: bool = False
    name: str | None = None
    uuid: str | None = None


@dataclass
class _HostMemory:
    state: HostState = "unknown"
    failures: int = 0
    gpu_count: int | None = None
    driver_version: str | None = None
    gpus: dict[int, _GpuMemory] = field(default_factory=dict)


class HealthTracker:
    """Remembers each host's and GPU's health between outcomes and reports what changed."""

    def __init__(self, settings: HealthSettings | None = None,
                 seeds: Iterable[HostSeed] = ()) -> None:
        self.settings = settings or HealthSettings()
        self._hosts: dict[str, _HostMemory] = {}
        for host_seed in seeds:
            self.seed(host_seed)

    def seed(self, host_seed: HostSeed) -> None:
        """Start `host_seed.host` from stored state, so a restart does not re-fire its events.

        A stored failed host follows its next failure at once (fleet.health.host_state); a
        stored "hot" GPU is inside its hysteresis band; a stored "lost" GPU counts as "failed".
        """
        memory = _HostMemory(
            state=known_state(host_seed.state),
            gpu_count=host_seed.gpu_count,
            driver_version=host_seed.driver_version,
        )
        for gpu in host_seed.gpus:
            state = GPU_FAILED if gpu.state == "lost" else gpu.state
            memory.gpus[gpu.index] = _GpuMemory(
                state=state, hot=state == GPU_HOT, name=gpu.name, uuid=gpu.uuid
            )
        self._hosts[host_seed.host] = memory

    def forget(self, host: str) -> None:
        """Drop what is remembered about `host` (it left the inventory)."""
        self._hosts.pop(host, None)

    def host_state(self, host: str) -> HostState | None:
        """The host's state as tracked (the rule applied to what it saw), or None if unseen."""
        memory = self._hosts.get(host)
        return None if memory is None else memory.state

    def failures(self, host: str) -> int:
        """Consecutive failed outcomes of `host` up to now (0 after a good one)."""
        memory = self._hosts.get(host)
        return 0 if memory is None else memory.failures

    def sync_host_state(self, host: str, stored: str) -> None:
        """Take the host's state as the database now holds it (`fleet status` may have run)."""
        self._hosts.setdefault(host, _HostMemory()).state = known_state(stored)

    def gpu_state(self, host: str, index: int) -> str | None:
        """The GPU's health state as tracked, or None if the GPU was never seen."""
        memory = self._hosts.get(host)
        gpu = None if memory is None else memory.gpus.get(index)
        return None if gpu is None else gpu.state

    def gpu_states(self, host: str) -> dict[int, str]:
        """The tracked health state of each GPU of `host` seen so far, by index."""
        memory = self._hosts.get(host)
        return {} if memory is None else {index: gpu.state for index, gpu in memory.gpus.items()}

    def observe(self, host: str, outcome: HostOutcome, reason: str | None,
                report: ProbeReport | None, now: float) -> list[HealthChange]:
        """Take one probe outcome of `host` ("up" with a report, or a failure and its reason).

        Counts failures and moves `host_state` by the host rule; returns the GPU and fact
        changes, in the order they should be applied; `now` (epoch seconds) goes into their data.
        """
        memory = self._hosts.setdefault(host, _HostMemory())
        if outcome != "up" or report is None:
            memory.failures += 1
            memory.state = host_transition(
                host, memory.state, "probe_error" if outcome == "up" else outcome, reason,
                failures=memory.failures, down_after=self.settings.host_down_after,
            ).state
            return []
        changes: list[HealthChange] = []
        memory.failures = 0
        memory.state = "up"
        facts = self.settings.fact_change_events
        if facts:
            changes.extend(self._host_fact_changes(host, memory, report))
        memory.gpu_count = len(report.gpus)
        if report.host.driver_version is not None:
            memory.driver_version = report.host.driver_version
        states = self._gpu_changes(host, memory, report, now, changes if facts else None)
        changes.extend(states)
        return changes

    def _host_fact_changes(self, host: str, memory: _HostMemory,
                           report: ProbeReport) -> list[HealthChange]:
        changes: list[HealthChange] = []
        count = len(report.gpus)
        if memory.gpu_count is not None and count != memory.gpu_count:
            detail = f" ({report.gpu_reason})" if report.gpu_reason else ""
            changes.append(HealthChange(
                host, None, "gpu_count_changed", "warning", None, None,
                f"{host}: GPU count {memory.gpu_count} -> {count}{detail}",
                {"from": memory.gpu_count, "to": count, "reason": report.gpu_reason},
            ))
        driver = report.host.driver_version
        if driver is not None and memory.driver_version is not None \
                and driver != memory.driver_version:
            changes.append(HealthChange(
                host, None, "driver_version_changed", "warning", None, None,
                f"{host}: driver {memory.driver_version} -> {driver}",
                {"from": memory.driver_version, "to": driver},
            ))
        return changes

    def _gpu_changes(self, host: str, memory: _HostMemory, report: ProbeReport, now: float,
                     fact_changes: list[HealthChange] | None) -> list[HealthChange]:
        """Each GPU's state change (a GPU no longer listed fails); with `fact_changes`, a
        changed model or UUID of a GPU seen before is added there. Runs for every reading of
        every GPU, so the common case (nothing changed) does no more than compare."""
        changes: list[HealthChange] = []
        known_gpus = memory.gpus
        hot_c, cool_c = self.settings.gpu_hot_c, self.settings.gpu_cool_c
        for gpu in report.gpus:
            known = known_gpus.get(gpu.index)
            if known is None:
                known = known_gpus[gpu.index] = _GpuMemory()
            elif fact_changes is not None and (gpu.name != known.name
                                               or gpu.uuid != known.uuid):
                fact_changes.extend(_gpu_fact_changes(host, gpu, known))
            if gpu.name:
                known.name = gpu.name
            if gpu.uuid:
                known.uuid = gpu.uuid
            if gpu.temperature_c is not None:  # hysteresis: hot from gpu_hot_c to gpu_cool_c
                known.hot = gpu.temperature_c >= (cool_c if known.hot else hot_c)
            new_state = self._gpu_state(gpu, known.hot)
            if new_state == known.state:  # the common case: no event, so no cause to word
                continue
            cause = self._gpu_cause(gpu, new_state)
            data: dict[str, object] = {
                "temperature_c": gpu.temperature_c,
                "ecc_errors_uncorrected": gpu.ecc_errors_uncorrected,
                "retired_pages_pending": gpu.retired_pages_pending,
                "lost": gpu.lost,
                "error": gpu.error,
                "uuid": gpu.uuid,
            }
            change = self._transition(host, gpu.index, known, new_state, cause, data, now)
            if change is not None:
                changes.append(change)
        if len(known_gpus) > len(report.gpus):  # indexes are unique: some GPU is not listed
            listed = {gpu.index for gpu in report.gpus}
            for index in sorted(set(known_gpus) - listed):
                known = known_gpus[index]
                known.hot = False
                why = report.gpu_reason or "the probe no longer lists it"
                change = self._transition(host, index, known, GPU_FAILED, f"missing: {why}",
                                          {"missing": True, "uuid": known.uuid}, now)
                if change is not None:
                    changes.append(change)
        return changes

    def _transition(self, host: str, index: int, known: _GpuMemory, new_state: str, cause: str,
                    data: dict[str, object], now: float) -> HealthChange | None:
        old_state = known.state
        if new_state == old_state:
            return None
        known.state = new_state
        severity: Severity
        if new_state == GPU_OK:
            kind, severity = ("gpu_cooled" if old_state == GPU_HOT else "gpu_recovered"), "info"
        else:
            kind, severity = _GPU_STATE_EVENTS[new_state]
        return HealthChange(
            host, index, kind, severity, old_state, new_state,
            f"{host} GPU {index}: {old_state} -> {new_state} ({cause})",
            {"from": old_state, "to": new_state, "cause": cause, "at": now, **data},
        )

    def _gpu_state(self, gpu: GpuReport, hot: bool) -> str:
        """The state a GPU reading puts the GPU in."""
        if gpu.lost or gpu.error is not None:
            return GPU_FAILED
        if self._ecc_degrades(gpu) or self._pages_degrade(gpu):  # no list built per reading
            return GPU_DEGRADED
        return GPU_HOT if hot else GPU_OK

    def _ecc_degrades(self, gpu: GpuReport) -> bool:
        """Whether the reading's uncorrectable ECC errors degrade the GPU."""
        return self.settings.ecc_uncorrected_degrades and (gpu.ecc_errors_uncorrected or 0) > 0

    def _pages_degrade(self, gpu: GpuReport) -> bool:
        """Whether the reading's pending page retirements degrade the GPU."""
        return self.settings.retired_pages_degrade and bool(gpu.retired_pages_pending)

    def _degradations(self, gpu: GpuReport) -> list[str]:
        """What degrades a GPU in this reading (uncorrectable ECC errors, retired pages)."""
        degraded: list[str] = []
        if self._ecc_degrades(gpu):
            degraded.append(f"{gpu.ecc_errors_uncorrected} uncorrectable ECC errors")
        if self._pages_degrade(gpu):
            degraded.append("retired pages pending")
        return degraded

    def _gpu_cause(self, gpu: GpuReport, state: str) -> str:
        """Why the reading puts the GPU in `state` (_gpu_state's answer for it)."""
        if state == GPU_FAILED:
            return gpu.error or "NVML reports the GPU is lost"
        if state == GPU_DEGRADED:
            return ", ".join(self._degradations(gpu))
        if state == GPU_HOT:
            return (f"temperature {_celsius(gpu.temperature_c)}, ceiling "
                    f"{self.settings.gpu_hot_c:g} °C, ok below {self.settings.gpu_cool_c:g} °C")
        if gpu.temperature_c is not None:
            return f"temperature {_celsius(gpu.temperature_c)}"
        return "healthy"


def _differs(known: str | None, seen: str | None) -> bool:
    """Whether a GPU fact seen now contradicts the one known (either may be unknown)."""
    return known is not None and seen is not None and known != seen


def _gpu_fact_changes(host: str, gpu: GpuReport, known: _GpuMemory) -> list[HealthChange]:
    """The changed model and UUID of a GPU seen before."""
    changes: list[HealthChange] = []
    for fact, old, new in (("name", known.name, gpu.name), ("uuid", known.uuid, gpu.uuid)):
        if _differs(old, new):
            what = "model" if fact == "name" else "UUID (GPU replaced?)"
            changes.append(HealthChange(
                host, gpu.index, "gpu_changed", "warning", None, None,
                f"{host} GPU {gpu.index}: {what} {old} -> {new}",
                {"field": fact, "from": old, "to": new},
            ))
    return changes


def _celsius(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g} °C"

"""Health rules: hysteresis, lost/failed, ECC, down after K, recovery, fact changes, seeding."""

from __future__ import annotations

import msgspec
import pytest

from fleet.health.rules import GpuSeed, HealthChange, HealthSettings, HealthTracker, HostSeed
from fleet.reports import GpuReport, HostReport, ProbeReport


def gpu(index: int = 0, **values: object) -> GpuReport:
    base = GpuReport(index=index, uuid=f"GPU-{index}", name="Sim H100", temperature_c=40.0)
    return msgspec.structs.replace(base, **values)


def report(*gpus: GpuReport, driver: str = "550.54", reason: str | None = None) -> ProbeReport:
    return ProbeReport(schema=1, timestamp=0.0, host=HostReport(driver_version=driver),
                       gpus=gpus, gpu_reason=reason)


def kinds(changes: list[HealthChange]) -> list[tuple[str, int | None, str | None]]:
    return [(change.kind, change.gpu_index, change.new_state) for change in changes]


# Each case: a sequence of GPU-0 temperatures and the (kind, new state) expected after each.
HYSTERESIS_CASES = [
    ("rises past ceiling", [70, 85], [None, ("gpu_hot", "hot")]),
    ("just below ceiling stays ok", [84.9], [None]),
    ("inside band stays hot", [90, 82, 80], [("gpu_hot", "hot"), None, None]),
    ("cools below hysteresis", [90, 79.9], [("gpu_hot", "hot"), ("gpu_cooled", "ok")]),
    ("inside band from ok stays ok", [90, 79, 84], [("gpu_hot", "hot"), ("gpu_cooled", "ok"),
                                                     None]),
    ("unreadable temperature keeps hot", [90, None, 79], [("gpu_hot", "hot"), None,
                                                          ("gpu_cooled", "ok")]),
]


@pytest.mark.parametrize(("temperatures", "expected"),
                         [case[1:] for case in HYSTERESIS_CASES],
                         ids=[case[0] for case in HYSTERESIS_CASES])
def test_temperature_hysteresis(temperatures: list[float | None],
                                expected: list[tuple[str, str] | None]) -> None:
    tracker = HealthTracker(HealthSettings(gpu_hot_c=85, gpu_cool_c=80))
    for step, (temperature, want) in enumerate(zip(temperatures, expected, strict=True)):
        changes = tracker.observe("h", "up", None, report(gpu(temperature_c=temperature)),
                                  now=step)
        assert kinds(changes) == ([] if want is None else [(want[0], 0, want[1])]), step


def test_hot_change_carries_event_data() -> None:
    tracker = HealthTracker()
    (change,) = tracker.observe("gpu01", "up", None, report(gpu(2, temperature_c=91)), now=5)
    assert change.severity == "warning"
    assert change.old_state == "ok"
    assert "gpu01 GPU 2: ok -> hot" in change.message
    assert change.data["temperature_c"] == 91
    event = change.to_event(5.0, event_id=7)
    assert event["kind"] == "gpu_hot" and event["id"] == 7 and event["gpu_index"] == 2


GPU_STATE_CASES = [
    ("lost", {"lost": True, "error": "GPU is lost (15)"}, "gpu_failed", "failed", "error"),
    ("nvml error on device", {"error": "nvmlDeviceGetHandleByIndex: Unknown Error"},
     "gpu_failed", "failed", "error"),
    ("ecc uncorrectable", {"ecc_errors_uncorrected": 3}, "gpu_degraded", "degraded", "warning"),
    ("retired pages pending", {"retired_pages_pending": True}, "gpu_degraded", "degraded",
     "warning"),
    ("lost beats hot", {"lost": True, "temperature_c": 99.0}, "gpu_failed", "failed", "error"),
    ("ecc beats hot", {"ecc_errors_uncorrected": 1, "temperature_c": 99.0}, "gpu_degraded",
     "degraded", "warning"),
]


@pytest.mark.parametrize(("values", "kind", "state", "severity"),
                         [case[1:] for case in GPU_STATE_CASES],
                         ids=[case[0] for case in GPU_STATE_CASES])
def test_bad_gpu_states_and_recovery(values: dict[str, object], kind: str, state: str,
                                     severity: str) -> None:
    tracker = HealthTracker()
    assert tracker.observe("h", "up", None, report(gpu()), now=0) == []
    (change,) = tracker.observe("h", "up", None, report(gpu(**values)), now=1)
    assert (change.kind, change.new_state, change.severity) == (kind, state, severity)
    assert tracker.observe("h", "up", None, report(gpu(**values)), now=2) == []
    (back,) = tracker.observe("h", "up", None, report(gpu()), now=3)
    assert (back.kind, back.old_state, back.new_state) == ("gpu_recovered", state, "ok")


def test_ecc_rule_can_be_switched_off() -> None:
    tracker = HealthTracker(HealthSettings(ecc_uncorrected_degrades=False))
    assert tracker.observe("h", "up", None, report(gpu(ecc_errors_uncorrected=5)), now=0) == []


@pytest.mark.parametrize("down_after", [1, 3, 5])
def test_host_down_after_k_failures_and_back_up(down_after: int) -> None:
    tracker = HealthTracker(HealthSettings(host_down_after=down_after))
    tracker.observe("h", "up", None, report(gpu()), now=0)
    for attempt in range(1, down_after):
        assert tracker.observe("h", "unreachable", "timed out", None, now=attempt) == []
        assert (tracker.host_state("h"), tracker.failures("h")) == ("up", attempt)
    assert tracker.observe("h", "unreachable", "timed out", None, now=down_after) == []
    assert (tracker.host_state("h"), tracker.failures("h")) == ("down", down_after)
    tracker.observe("h", "unreachable", "timed out", None, now=99)
    assert tracker.host_state("h") == "down"
    tracker.observe("h", "up", None, report(gpu()), now=100)
    assert (tracker.host_state("h"), tracker.failures("h")) == ("up", 0)


def test_a_host_that_answers_is_never_down() -> None:
    tracker = HealthTracker(HealthSettings(host_down_after=2))
    tracker.observe("h", "up", None, report(gpu()), now=0)
    for now in range(1, 6):
        tracker.observe("h", "probe_error", "probe gave no reading for 3s", None, now=now)
    assert tracker.host_state("h") == "probe_error"
    tracker.observe("h", "unreachable", "connection lost", None, now=6)
    assert tracker.host_state("h") == "down"


def test_success_resets_failure_count() -> None:
    tracker = HealthTracker(HealthSettings(host_down_after=3))
    for now in range(4):
        tracker.observe("h", "unreachable", None, None, now=now * 3)
        tracker.observe("h", "probe_error", "garbage", None, now=now * 3 + 1)
        assert tracker.observe("h", "up", None, report(gpu()), now=now * 3 + 2) == []
    assert tracker.host_state("h") == "up"


def test_gpu_count_driver_model_and_uuid_changes_are_events() -> None:
    tracker = HealthTracker()
    tracker.observe("h", "up", None, report(gpu(0), gpu(1)), now=0)
    changes = tracker.observe("h", "up", None,
                              report(gpu(0, name="Sim A100", uuid="GPU-new"), driver="555.1"),
                              now=1)
    assert kinds(changes) == [
        ("gpu_count_changed", None, None),
        ("driver_version_changed", None, None),
        ("gpu_changed", 0, None),
        ("gpu_changed", 0, None),
        ("gpu_failed", 1, "failed"),
    ]
    assert changes[0].data == {"from": 2, "to": 1, "reason": None}
    assert changes[1].data == {"from": "550.54", "to": "555.1"}
    assert "missing" in changes[4].message
    assert not any(change.sets_host_state for change in changes)


def test_nvml_failure_on_host_fails_every_known_gpu() -> None:
    tracker = HealthTracker()
    tracker.observe("h", "up", None, report(gpu(0), gpu(1)), now=0)
    changes = tracker.observe("h", "up", None, report(reason="NVML: Driver Not Loaded"), now=1)
    assert kinds(changes) == [("gpu_count_changed", None, None), ("gpu_failed", 0, "failed"),
                              ("gpu_failed", 1, "failed")]
    assert "Driver Not Loaded" in changes[1].message


def test_first_sight_of_a_host_fires_no_fact_events() -> None:
    tracker = HealthTracker()
    assert tracker.observe("h", "up", None, report(gpu(0), gpu(1)), now=0) == []


SEED_CASES = [
    ("stored hot, still hot: quiet", "hot", {"temperature_c": 83.0}, []),
    ("stored hot, cooled: event", "hot", {"temperature_c": 60.0}, [("gpu_cooled", 0, "ok")]),
    ("stored failed, still lost: quiet", "failed", {"lost": True}, []),
    ("stored lost (recorder), still lost: quiet", "lost", {"lost": True}, []),
    ("stored degraded, still ECC: quiet", "degraded", {"ecc_errors_uncorrected": 2}, []),
    ("stored ok, now hot: event", "ok", {"temperature_c": 95.0}, [("gpu_hot", 0, "hot")]),
]


@pytest.mark.parametrize(("stored", "values", "expected"), [c[1:] for c in SEED_CASES],
                         ids=[c[0] for c in SEED_CASES])
def test_seeding_from_stored_gpu_state(stored: str, values: dict[str, object],
                                       expected: list[tuple[str, int, str]]) -> None:
    seed = HostSeed("h", state="up", gpu_count=1, driver_version="550.54",
                    gpus=(GpuSeed(0, state=stored, name="Sim H100", uuid="GPU-0"),))
    tracker = HealthTracker(seeds=[seed])
    assert kinds(tracker.observe("h", "up", None, report(gpu(**values)), now=0)) == expected


def test_seeded_down_host_stays_down_until_it_answers() -> None:
    seed = HostSeed("h", state="down", gpu_count=1, driver_version="550.54",
                    gpus=(GpuSeed(0, name="Sim H100", uuid="GPU-0"),))
    tracker = HealthTracker(HealthSettings(host_down_after=2), seeds=[seed])
    assert tracker.observe("h", "unreachable", None, None, now=0) == []
    assert tracker.host_state("h") == "down"
    assert tracker.observe("h", "up", None, report(gpu()), now=1) == []
    assert tracker.host_state("h") == "up"


def test_seeded_facts_detect_changes_across_restart() -> None:
    seed = HostSeed("h", state="up", gpu_count=8, driver_version="535.0")
    tracker = HealthTracker(seeds=[seed])
    changes = tracker.observe("h", "up", None, report(gpu(), driver="550.54"), now=0)
    assert kinds(changes)[:2] == [("gpu_count_changed", None, None),
                                  ("driver_version_changed", None, None)]


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="gpu_cool_c"):
        HealthSettings(gpu_hot_c=80, gpu_cool_c=85)
    with pytest.raises(ValueError, match="host_down_after"):
        HealthSettings(host_down_after=0)

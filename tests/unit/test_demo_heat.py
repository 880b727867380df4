"""The demo's scenario makes exactly one GPU overheat (the README's promise), for any seed."""

from __future__ import annotations

import random

import pytest

from fleet.demo import (
    CYCLE_S,
    DEMO_HOSTS,
    DRIFT_INTERVAL_S,
    HOT_GPU,
    drift,
    initial_gpus,
    overheat,
)
from fleet.health.rules import HealthSettings
from fleet.sim.gpus import next_temperature

SIMULATED_S = 2 * CYCLE_S + 30.0  # 3.5 minutes: two overheating phases and the cooling after


def _shown_temperatures(seed: int) -> list[dict[tuple[str, int], int]]:
    """What the probe reads at each drift step, as demo_fleet and _scenario_forever produce it
    (same generator, same order of random draws), with the clock advanced step by step."""
    rng = random.Random(seed)
    hosts = {name: initial_gpus(name, count, model, memory, rng)
             for name, count, model, memory in DEMO_HOSTS}
    readings = []
    elapsed = 0.0
    while elapsed < SIMULATED_S:
        elapsed += DRIFT_INTERVAL_S
        phase = elapsed % CYCLE_S
        reading = {}
        for name in hosts:
            hosts[name] = drift(hosts[name], rng)
            shown = overheat(hosts[name], HOT_GPU[1], phase) if name == HOT_GPU[0] \
                else hosts[name]
            reading.update({(name, index): gpu.temperature_c
                            for index, gpu in enumerate(shown.gpus)})
        readings.append(reading)
    return readings


@pytest.mark.parametrize("seed", [7, *range(20)])  # 7 is demo_fleet's own seed
def test_only_the_scenario_gpu_goes_hot_and_it_cools_again(seed: int) -> None:
    settings = HealthSettings()
    readings = _shown_temperatures(seed)

    ever_hot = {gpu for reading in readings for gpu, temp in reading.items()
                if temp >= settings.gpu_hot_c}
    assert ever_hot == {HOT_GPU}

    # Each cycle the hot GPU crosses the ceiling, then falls below the cooling threshold.
    steps_per_cycle = round(CYCLE_S / DRIFT_INTERVAL_S)
    for cycle in range(2):
        window = [reading[HOT_GPU] for reading in
                  readings[cycle * steps_per_cycle:(cycle + 1) * steps_per_cycle]]
        peak = window.index(max(window))
        assert window[peak] >= settings.gpu_hot_c
        assert min(window[peak:]) < settings.gpu_cool_c


def test_a_busy_gpu_settles_below_the_cooling_threshold() -> None:
    rng = random.Random(1)
    temperature = 84.0
    for _ in range(1_000):
        temperature = round(next_temperature(temperature, 100.0, rng.uniform(-1, 1)))
    assert temperature < HealthSettings().gpu_cool_c
    # Worst case: full load and the largest noise every step, rounded up.
    worst = 0.0
    for _ in range(1_000):
        worst = float(round(next_temperature(worst, 100.0, 1.0) + 0.49))
    assert worst < HealthSettings().gpu_cool_c

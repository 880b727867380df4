"""Limits in local mode: a dispatch over `limits.max_gpus_per_user` is refused with exit 7
naming the limit and recording no task; `--override-limits` runs it and records a
`limits_overridden` event."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]


async def _lab_limited_to_one_gpu(dispatch_lab: LabFactory) -> DispatchLab:
    """A host with 2 GPUs, and `limits.max_gpus_per_user: 1` in the settings."""
    lab = await dispatch_lab(2)
    config = lab.cli.home / ".config" / "fleet" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("limits:\n  max_gpus_per_user: 1\n")
    return lab


@pytest.mark.slow
async def test_over_the_limit_is_refused_and_override_limits_runs_it_on_record(
        dispatch_lab: LabFactory) -> None:
    lab = await _lab_limited_to_one_gpu(dispatch_lab)
    held = await lab.cli.run("--json", "reserve", "--gpus", "1", env={"FLEET_OWNER": "ann"})
    assert held.returncode == 0, held.stderr
    script = _script(lab, "quick.py", "print('ran')\n")
    refused = await lab.cli.run("dispatch", str(script), env={"FLEET_OWNER": "ann"})
    assert refused.returncode == 7, refused.stderr
    assert "limits.max_gpus_per_user = 1: ann holds 1 GPU(s) and asks for 1 more" in \
        refused.stderr
    lifted = await lab.cli.run("dispatch", "--override-limits", str(script),
                               env={"FLEET_OWNER": "ann"})
    assert lifted.returncode == 0 and "ran" in lifted.stdout, lifted.stderr
    tasks = await _tasks(lab)
    assert [task["state"] for task in tasks] == ["failed", "succeeded"]
    events = await lab.cli.run("--json", "events", "--kind", "limits_overridden")
    (event,) = json.loads(events.stdout)["events"]
    assert event["task_id"] == tasks[1]["id"] and "of ann ignores the limits" in \
        event["message"]


@pytest.mark.slow
async def test_a_queued_request_beyond_the_limit_itself_is_refused_at_once(
        dispatch_lab: LabFactory) -> None:
    lab = await _lab_limited_to_one_gpu(dispatch_lab)
    script = _script(lab, "quick.py", "print('ran')\n")
    refused = await lab.cli.run("dispatch", "--wait", "--gpus", "2", str(script),
                                env={"FLEET_OWNER": "ann"})
    assert refused.returncode == 7, refused.stderr  # it waited out --queue-timeout (24 h)
    assert "can never start: limits.max_gpus_per_user = 1: ann holds 0 GPU(s) and asks for " \
        "2 more" in refused.stderr
    (task,) = await _tasks(lab)
    assert task["state"] == "failed"

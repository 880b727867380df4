"""Ctrl-C while a dispatch writes its task's row ends that row as cancelled at once: a row
left `placing` stood ahead of every waiting task until the reconciler's bound (~2 min)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import db.tasks
from db.engine import open_database
from db.sql import SessionReader
from db.task_reads import get_task
from fleet.context import FleetContext
from fleet.dispatch.lifecycle import create_record
from fleet.dispatch.request import DispatchRequest
from fleet.placement.request import PlacementRequest
from fleet.ssh.options import SshOptions


async def test_a_row_written_under_a_cancel_is_ended_as_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_create = db.tasks.create_task

    def slow_create(*args: object, **kwargs: object) -> int:
        time.sleep(0.3)  # the cancel lands while the row is being written
        return real_create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(db.tasks, "create_task", slow_create)
    with open_database(str(tmp_path / "fleet.db")) as database:
        context = FleetContext(database, lambda: pytest.fail("inventory read"), SshOptions())
        request = DispatchRequest(script=tmp_path / "t.py", placement=PlacementRequest())
        writing = asyncio.ensure_future(create_record(context, request, "ann"))
        await asyncio.sleep(0.05)
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
        with database.session() as session:
            row = get_task(SessionReader(session), 1)
        assert row is not None and row.state == "cancelled", row
        assert row.error == "cancelled before it was placed"

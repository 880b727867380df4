"""Permissions live in the service layer: own work vs admin, refusals as events, local mode free."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.tasks import create_task
from db.types import GpuFacts, HostFacts
from fleet.caller import Caller, caller_for_uid, user_name
from fleet.errors import PermissionDenied
from fleet.inventory import Inventory
from fleet.placement.claim import claim
from fleet.placement.request import PlacementRequest
from fleet.render.exit_codes import EXIT_NOT_PERMITTED
from fleet.service import Fleet, open_database
from fleet.ssh.options import SshOptions

EMPTY = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
ANN = Caller("ann", 2001)
BOB = Caller("bob", 2002)
ADMIN = Caller("root", 0, frozenset({"root"}), is_admin=True)


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[Fleet]:
    """A Fleet over a fresh database with host gpu1 (2 GPUs) known."""
    service = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, SshOptions())
    with service.database.session() as session:
        host_id = sync_hosts(session, [HostFacts("gpu1", "10.0.0.1")], now=1000)["gpu1"]
        upsert_gpus(session, host_id, [GpuFacts(0, "GPU-0"), GpuFacts(1, "GPU-1")], now=1000)
    yield service
    service.close()


async def _refusals(service: Fleet) -> list[tuple[str, object]]:
    events = await service.events(kind="permission_denied")
    return [(event.message, event.data.get("user")) for event in events]


def test_permission_denied_exits_8() -> None:
    assert PermissionDenied.exit_code == EXIT_NOT_PERMITTED == 8


async def test_release_only_own_reservation_unless_admin(seeded: Fleet) -> None:
    held = claim(seeded.database, "gpu1", [0], kind="reservation", owner="ann")
    (allocation_id,) = held.allocation_ids

    with pytest.raises(PermissionDenied, match=r"bob is not permitted.*belongs to ann"):
        await seeded.release([allocation_id], caller=BOB)

    assert [row.id for row in await seeded.allocations()] == [allocation_id]
    assert await _refusals(seeded) == [
        (f"bob is not permitted to release allocation {allocation_id}: it belongs to ann",
         "bob")]
    assert await seeded.release([allocation_id], caller=ANN) == [allocation_id]
    other = claim(seeded.database, "gpu1", [1], kind="reservation", owner="ann")
    assert await seeded.release(list(other.allocation_ids), caller=ADMIN) == \
        list(other.allocation_ids)


async def test_release_mine_through_the_server_is_the_callers(seeded: Fleet,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setenv("FLEET_OWNER", "ann")
    claim(seeded.database, "gpu1", [0], kind="reservation", owner="ann")
    assert await seeded.release_mine(caller=BOB) == []  # FLEET_OWNER=ann does not count
    assert len(await seeded.allocations()) == 1
    assert len(await seeded.release_mine(caller=ANN)) == 1


async def test_cancel_only_own_task(seeded: Fleet) -> None:
    with seeded.database.session() as session:
        task_id = create_task(session, name="t", script="t.py", args=(), gpus_requested=1,
                              owner="ann", now=1000)
    with pytest.raises(PermissionDenied, match="cancel task"):
        await seeded.cancel(task_id, caller=BOB)
    assert (await seeded.task(task_id)).state == "queued"
    assert (await seeded.cancel(task_id, caller=ANN)).state == "cancelled"


async def test_drain_needs_an_admin(seeded: Fleet) -> None:
    with pytest.raises(PermissionDenied, match="only an admin"):
        await seeded.drain("gpu1", "fan", caller=ANN)
    assert not (await seeded.registered_hosts())[0].drained
    outcome = await seeded.drain("gpu1", "fan", caller=ADMIN)
    assert outcome.changed and (await seeded.registered_hosts())[0].drained
    with pytest.raises(PermissionDenied):
        await seeded.undrain("gpu1", caller=BOB)
    events = await seeded.events(kind="host_drained")
    assert events[0].data["by"] == "root"
    assert [user for _message, user in await _refusals(seeded)] == ["ann", "bob"]


async def test_local_mode_checks_nothing(seeded: Fleet) -> None:
    held = claim(seeded.database, "gpu1", [0], kind="reservation", owner="someone-else")
    assert await seeded.release(list(held.allocation_ids)) == list(held.allocation_ids)
    assert (await seeded.drain("gpu1:1", "test")).changed
    assert await _refusals(seeded) == []


def test_caller_for_uid_admin_by_group_or_server_user() -> None:
    uid = os.getuid()
    me = caller_for_uid(uid, admin_groups=(), server_uid=uid)
    assert me.user == user_name(uid) and me.is_admin
    assert not caller_for_uid(uid, admin_groups=(), server_uid=uid + 1).is_admin
    group = sorted(me.groups)[0]
    assert caller_for_uid(uid, admin_groups=[group], server_uid=uid + 1).is_admin
    assert not caller_for_uid(uid, admin_groups=["no-such-group-x"], server_uid=uid).is_admin
    assert Caller("ann", 1).may_act_on("ann") and not Caller("ann", 1).may_act_on("bob")


async def test_only_admins_name_code_as_a_policy_or_adopt(seeded: Fleet) -> None:
    with pytest.raises(PermissionDenied, match="policy 'os:system'"):
        await seeded.reserve(PlacementRequest(policy="os:system"), caller=ANN)
    with pytest.raises(PermissionDenied, match=r"adopt 10\.0\.0\.9"):
        await seeded.adopt("10.0.0.9", caller=BOB)
    assert [user for _message, user in await _refusals(seeded)] == ["ann", "bob"]

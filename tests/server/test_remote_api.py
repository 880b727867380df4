"""RemoteFleet offers Fleet's methods under the same names, parameters and return types."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from fleet.client.remote import RemoteFleet
from fleet.service import Fleet
from fleet.ssh.options import SshOptions

REMOTE_ONLY = {"live_snapshot", "whoami", "close", "socket_path", "place_report",
               "enqueue"}
MODE_FLAG = "remote"  # a plain attribute on both: False on Fleet, True on RemoteFleet


def _fleet_methods(tmp_path: Path) -> dict[str, object]:
    from fleet.inventory import Inventory
    from fleet.service import open_database

    empty = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
    service = Fleet(open_database(str(tmp_path / "f.db")), empty, SshOptions())
    methods = {name: getattr(service, name) for name in dir(service)
               if not name.startswith("_") and callable(getattr(service, name))}
    service.close()
    return methods


def _public(kind: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(kind) if not name.startswith("_")]


def test_both_say_which_mode_they_are(tmp_path: Path) -> None:
    from fleet.service import Fleet

    assert (Fleet.remote, RemoteFleet.remote) == (False, True)


@pytest.mark.parametrize("name", sorted(set(_public(RemoteFleet)) - REMOTE_ONLY - {MODE_FLAG}))
def test_remote_method_matches_the_local_one(name: str, tmp_path: Path) -> None:
    local = _fleet_methods(tmp_path)[name]
    remote = getattr(RemoteFleet, name)
    local_params = inspect.signature(local).parameters
    remote_params = dict(inspect.signature(remote).parameters)
    remote_params.pop("self")
    for param in remote_params.values():  # every remote parameter is a local one, same kind
        assert param.name in local_params, (name, param.name)
        assert param.kind == local_params[param.name].kind, (name, param.name)
        assert param.default == local_params[param.name].default, (name, param.name)
    required = [p.name for p in local_params.values() if p.default is inspect.Parameter.empty]
    assert all(p in remote_params for p in required), (name, required)
    assert (inspect.iscoroutinefunction(remote), inspect.isasyncgenfunction(remote)) == \
        (inspect.iscoroutinefunction(local), inspect.isasyncgenfunction(local)), name
    # Annotations are strings (postponed evaluation) naming the same types in both modules.
    assert inspect.signature(remote).return_annotation == \
        inspect.signature(local).return_annotation, name


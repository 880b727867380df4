"""The one set of hosts fleet manages: the inventory's plus those adopted into the database.

Status, watch, the monitor, placement, dispatch and the reconciler all ask this set, so a host
adopted through discovery is probed, placed on and repaired like an inventory host. Adopted
hosts are read with one narrow query and cached briefly; `adopted()` changes it at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleet.discovery import ADOPTED_SPEC_SOURCE
from fleet.errors import ConfigError
from fleet.model import HostSpec
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.inventory import Inventory

ADOPTED_GROUP = "adopted"
# How long the adopted hosts read from the database are reused before being read again.
ADOPTED_CACHE_S = 5.0


class ManagedHosts:
    """Inventory + adopted hosts, with `--hosts` pattern selection over both."""

    def __init__(self, base_inventory: Callable[[], Inventory], database: Database) -> None:
        self._base_inventory = base_inventory
        self._database = database
        self._merged: Inventory | None = None
        self._loaded_at = float("-inf")

    def inventory(self) -> Inventory:
        """The inventory plus adopted hosts (group `adopted`)."""
        if self._merged is None or time.monotonic() - self._loaded_at > ADOPTED_CACHE_S:
            self._merged = self._load()
            self._loaded_at = time.monotonic()
        return self._merged

    async def refresh(self) -> Inventory:
        """Re-read adopted hosts off the event loop; returns the merged inventory."""
        merged = await asyncio.to_thread(self._load)
        self._merged, self._loaded_at = merged, time.monotonic()
        return merged

    def changed(self) -> None:
        """Forget the cached set (a host was adopted); the next read sees it."""
        self._merged = None

    def select(self, pattern: str | None = None) -> tuple[HostSpec, ...]:
        """Managed hosts matching a `--hosts` pattern (all for None); ConfigError on no match."""
        from fleet.inventory import select_hosts  # the inventory package, only once it is used

        return select_hosts(self.inventory(), pattern)

    def spec(self, name: str) -> HostSpec:
        """The managed host called `name`; ConfigError naming it when fleet does not manage it."""
        found = self.inventory().host(name)
        if found is None:
            raise ConfigError(f"host {name!r} is not in the inventory or among adopted hosts")
        return found

    def find(self, name: str) -> HostSpec | None:
        """The managed host called `name`, or None."""
        return self.inventory().host(name)

    def adopted(self) -> tuple[HostSpec, ...]:
        """The adopted hosts that the inventory does not list."""
        inventory = self.inventory()
        return tuple(spec for spec in inventory.hosts if spec.source == ADOPTED_SPEC_SOURCE)

    def _load(self) -> Inventory:
        from db.host_reads import adopted_endpoints

        with storage_errors("list adopted hosts", self._database.url), \
                self._database.reader() as reader:
            rows = adopted_endpoints(reader)
        base = self._base_inventory()
        in_inventory = {spec.key for spec in base.hosts}
        names = {spec.name for spec in base.hosts}
        adopted = tuple(
            HostSpec(name=name, address=address, port=port, user=user,
                     source=ADOPTED_SPEC_SOURCE, groups=(ADOPTED_GROUP,),
                     labels=(("fleet.source", "adopted"),))
            for name, address, port, user in rows
            if (address, port) not in in_inventory and name not in names)
        if not adopted:
            return base
        groups = dict(base.groups)
        groups[ADOPTED_GROUP] = tuple(
            dict.fromkeys([*groups.get(ADOPTED_GROUP, ()), *(spec.name for spec in adopted)]))
        return dataclasses.replace(base, hosts=(*base.hosts, *adopted), groups=groups)

"""The placement part of the public `Fleet` service API: placement, claims, reservations."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.inventory import Inventory
    from fleet.ssh.options import SshOptions


class PlacementAPI:
    """Placement and reservation operations of the Fleet service (state lives on Fleet)."""

    database: Database
    inventory: Inventory
    ssh_options: SshOptions

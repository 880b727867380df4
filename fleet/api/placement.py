"""The placement part (placement, claims, reservations) of the public `Fleet` service API (mixed into fleet.service.Fleet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.inventory import Inventory
    from fleet.ssh.options import SshOptions


class PlacementAPI:
    """Placement and reservation operations of the Fleet service; state lives on the Fleet instance."""

    database: Database
    inventory: Inventory
    ssh_options: SshOptions

"""Small services over one shared FleetContext; `fleet.service.Fleet` composes them."""

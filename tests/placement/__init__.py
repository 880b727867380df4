"""Placement, claims, reservations and task rows."""

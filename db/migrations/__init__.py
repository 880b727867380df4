"""Alembic migrations for the fleet database."""

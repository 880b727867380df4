"""Alembic migration scripts."""

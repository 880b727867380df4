"""Placement: choosing GPUs for a request, claiming them atomically, operator reservations.

The parts: request (what is asked), candidates (what is there), filters and scoring (pure
placement in place.py), explain (tables and JSON), claim and reservations (the database side).
"""

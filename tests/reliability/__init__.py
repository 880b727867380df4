"""Reliability tests (issue 9)."""

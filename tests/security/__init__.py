"""Security tests (issue 9)."""

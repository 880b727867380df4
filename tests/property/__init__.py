"""Property tests (issue 9)."""

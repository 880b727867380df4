"""Tests of health rules, hooks, retention, backup, drain, events and the status endpoint."""

"""Users' placement rules, importable as `tests.placement.policies_pkg:NAME` in tests."""

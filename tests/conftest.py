"""Shared pytest configuration: registers the fixture modules of every test area."""

pytest_plugins = [
    "tests.fixtures.simgpu",
    "tests.fixtures.sshserver",
    "tests.fixtures.cluster",
    "tests.fixtures.cli",
    "tests.fixtures.database",
]

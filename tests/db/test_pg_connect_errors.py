"""A PostgreSQL server that is down, a wrong password or a missing database: exit 4, the URL
named with its password hidden."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleet.cli.main import main
from tests.fixtures.database import PgServer
from tests.fixtures.pgcluster import free_port

ROLE, PASSWORD = "fleet_tcp", "right-horse-battery"


@pytest.fixture
def tcp_role(pg_server: PgServer) -> Iterator[str]:
    """A login role checked with scram-sha-256 over TCP, owning a fresh fleet database."""
    pg_server.admin.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
    name = pg_server.create_empty_database("tcp")
    pg_server.admin.execute(f"ALTER DATABASE {name} OWNER TO {ROLE}")
    try:
        yield name
    finally:
        pg_server.drop_database(name)
        pg_server.admin.execute(f"DROP ROLE {ROLE}")


def _events(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, str]:
    code = main(["--db", url, "events"])
    return code, capsys.readouterr().err


def test_bad_server_password_or_database_exit_4_naming_the_redacted_url(
    pg_server: PgServer, tcp_role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    port = pg_server.cluster.port
    good = f"postgresql+psycopg://{ROLE}:{PASSWORD}@127.0.0.1:{port}/{tcp_role}"
    code, err = _events(capsys, good)
    assert code == 0, err  # the role works: the cases below fail for their own reason only

    nobody = free_port()
    cases = {
        f"postgresql+psycopg://{ROLE}:{PASSWORD}@127.0.0.1:{nobody}/{tcp_role}":
            (f"{ROLE}:***@127.0.0.1:{nobody}/{tcp_role}", "Connection refused"),
        f"postgresql+psycopg://{ROLE}:wrong-{PASSWORD}@127.0.0.1:{port}/{tcp_role}":
            (f"{ROLE}:***@127.0.0.1:{port}/{tcp_role}", "password authentication failed"),
        f"postgresql+psycopg://{ROLE}:{PASSWORD}@127.0.0.1:{port}/no_such_db":
            (f"{ROLE}:***@127.0.0.1:{port}/no_such_db", 'database "no_such_db" does not exist'),
    }
    for url, (shown, reason) in cases.items():
        code, err = _events(capsys, url)
        assert code == 4, (url, err)
        assert err.startswith("fleet: error: cannot open database postgresql+psycopg://" + shown)
        assert reason in err and PASSWORD not in err

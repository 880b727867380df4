"""The history services answer a bad bucket or limit with ConfigError (exit 2), as the CLI
does: a script calling the Python API catches FleetError only."""

from __future__ import annotations

from pathlib import Path

import pytest

import fleet
from fleet.errors import ConfigError


@pytest.mark.parametrize("arguments", [{"bucket_s": 0}, {"bucket_s": -60}, {"limit": 0}],
                         ids=["zero bucket", "negative bucket", "zero limit"])
async def test_bad_bucket_or_limit_is_a_config_error(tmp_path: Path,
                                                     arguments: dict[str, int]) -> None:
    async with fleet.open(str(tmp_path / "fleet.db"), tmp_path / "none.yaml") as service:
        with pytest.raises(ConfigError, match="must be"):
            await service.gpu_history(since=0, until=3600, **arguments)
        with pytest.raises(ConfigError, match="must be"):
            await service.host_history(since=0, until=3600, **arguments)
        assert await service.gpu_history(since=0, until=3600, bucket_s=60, limit=5) == []

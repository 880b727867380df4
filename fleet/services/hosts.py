"""Hosts and their data: the managed set, one-shot probes, stored hosts, samples and history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleet.fanout import DEFAULT_FANOUT, HostStatus, ProgressCallback, probe_hosts

if TYPE_CHECKING:
    from db.sql import SqlReader
    from db.types import GpuHistoryPoint, HostRow, LatestGpu
    from fleet.context import FleetContext
    from fleet.model import HostSpec


class HostService:
    """What fleet knows about its hosts, live (a probe) and stored."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context

    def hosts(self, pattern: str | None = None) -> tuple[HostSpec, ...]:
        """The managed hosts (inventory + adopted), optionally filtered by a `--hosts` pattern."""
        return self.context.hosts.select(pattern)

    async def managed_hosts(self, pattern: str | None = None) -> tuple[HostSpec, ...]:
        """`hosts(pattern)` after re-reading adopted hosts: the same answer locally and
        through the server (where it is `GET /v1/managed`)."""
        from fleet.inventory import select_hosts

        return select_hosts(await self.context.hosts.refresh(), pattern)

    async def status(
        self,
        pattern: str | None = None,
        *,
        timeout: float = 15.0,
        record: bool = True,
        fanout: int = DEFAULT_FANOUT,
        progress: ProgressCallback | None = None,
    ) -> list[HostStatus]:
        """Probe the selected hosts once, concurrently, and record what was seen."""
        from fleet.inventory import select_hosts

        specs = select_hosts(await self.context.hosts.refresh(), pattern)
        statuses = await probe_hosts(
            specs, self.context.ssh_options, timeout=timeout, fanout=fanout, progress=progress
        )
        if record:
            await self.record(statuses)
        return statuses

    async def record(self, statuses: Sequence[HostStatus]) -> None:
        """Store one-shot probe results: host states, facts, samples and their events."""
        from fleet.recorder import record_statuses

        await self.context.write_sql("record samples",
                                     lambda writer: record_statuses(writer, statuses))

    async def registered_hosts(self) -> list[HostRow]:
        """Every host the database knows, with its last state and facts."""
        from db.host_reads import list_hosts

        return await self.context.query("list hosts", list_hosts)

    async def latest_gpus(self, host_names: Sequence[str] | None = None) -> list[LatestGpu]:
        """Each known GPU with its latest recorded sample."""
        from db.gpus import latest_gpus

        return await self.context.read("read latest samples",
                                       lambda session: latest_gpus(session, host_names))

    async def gpu_history(
        self,
        *,
        since: float,
        until: float,
        host: str | None = None,
        gpu: str | None = None,
        bucket_s: int | None = None,
        limit: int | None = None,
    ) -> list[GpuHistoryPoint]:
        """GPU samples between two epoch times, raw or aggregated per `bucket_s` seconds.

        Bucketed ranges older than the raw-sample retention are answered from the 1- and
        5-minute rollups, so long histories stay available after raw samples are pruned. An unknown
        `host` or `gpu` ("HOST:IDX" or UUID) is a ConfigError naming what is known, and so is a
        non-positive bucket or limit.
        """
        from db.rollup_history import gpu_history_with_rollups
        from fleet.errors import ConfigError
        from fleet.targets import resolve_gpu, resolve_host

        def load(reader: SqlReader) -> list[GpuHistoryPoint]:
            if host is not None:
                resolve_host(reader, host)
            if gpu is not None:
                resolve_gpu(reader, gpu)
            try:
                return gpu_history_with_rollups(
                    reader, since_ms=int(since * 1000), until_ms=int(until * 1000), host=host,
                    gpu=gpu, bucket_s=bucket_s, limit=limit)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc

        return await self.context.query("read history", load)

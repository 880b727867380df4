"""mDNS announcer for one test host: publishes services with python-zeroconf until SIGTERM.

Run inside a host's namespace: `ip netns exec NS python -m tests.cluster.announcer --address IP
--hostname NAME --port 22 --services '{"_ssh._tcp": {}, "_fleet._tcp": {"v": "1"}}'`. It binds only
to --address (never 0.0.0.0), prints `ready` once every service is registered, and sends goodbye
packets on SIGTERM before exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "ready"
REGISTER_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class Announcer:
    """A running announcer process, started by the cluster for one host."""

    def __init__(self, process: subprocess.Popen[str], host_name: str, log_path: Path) -> None:
        self.process = process
        self.host_name = host_name
        self.log_path = log_path

    @classmethod
    def start(
        cls,
        *,
        argv_prefix: Sequence[str],
        address: str,
        hostname: str,
        port: int,
        services: Mapping[str, Mapping[str, str]],
        log_path: Path,
    ) -> Announcer:
        argv = [
            *argv_prefix,
            sys.executable,
            "-m",
            "tests.cluster.announcer",
            "--address",
            address,
            "--hostname",
            hostname,
            "--port",
            str(port),
            "--services",
            json.dumps({service: dict(txt) for service, txt in services.items()}),
        ]
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                start_new_session=True,
            )
        return cls(process, hostname, log_path)

    def wait_ready(self, deadline: float) -> None:
        """Blocks until the announcer printed `ready`, it died, or the deadline passed."""
        assert self.process.stdout is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise TimeoutError(f"{self.host_name}: mDNS announcer not registered in time")
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            if not readable:
                continue
            line = self.process.stdout.readline()
            if line.strip() == READY_LINE:
                return
            if not line:
                self.process.wait(timeout=STOP_TIMEOUT_S)
                log_tail = self.log_path.read_text(errors="replace").strip()[-2000:]
                raise RuntimeError(f"{self.host_name}: mDNS announcer exited: {log_tail}")

    def request_stop(self) -> None:
        """SIGTERM without waiting: the announcer starts saying goodbye (see `stop`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM (the announcer says goodbye), SIGKILL if it does not exit in time; reaps it."""
        if self.process.poll() is None:
            self.request_stop()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()


async def announce(
    address: str, hostname: str, port: int, services: Mapping[str, Mapping[str, str]]
) -> None:
    from zeroconf import IPVersion
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop_requested.set)
    loop.add_signal_handler(signal.SIGINT, stop_requested.set)
    zeroconf = AsyncZeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    infos = [
        AsyncServiceInfo(
            type_=f"{service}.local.",
            name=f"{hostname}.{service}.local.",
            addresses=[socket.inet_aton(address)],
            port=port,
            properties=dict(txt),
            server=f"{hostname}.local.",
        )
        for service, txt in services.items()
    ]
    try:
        # Each register call returns a task that finishes after probing and announcing.
        registrations = await asyncio.gather(
            *(zeroconf.async_register_service(info) for info in infos)
        )
        await asyncio.gather(*registrations)
        print(READY_LINE, flush=True)
        await stop_requested.wait()
        unregistrations = await asyncio.gather(
            *(zeroconf.async_unregister_service(info) for info in infos)
        )
        await asyncio.gather(*unregistrations)
    finally:
        await zeroconf.async_close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.announcer", description=__doc__)
    parser.add_argument("--address", required=True, help="IPv4 address to bind and announce")
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--services", required=True, help='JSON: {"_ssh._tcp": {TXT...}, ...}')
    args = parser.parse_args(argv)
    if args.address in ("0.0.0.0", ""):
        parser.error("--address must be one interface's address, never 0.0.0.0")
    services = json.loads(args.services)
    if not isinstance(services, dict) or not services:
        parser.error("--services must be a non-empty JSON object")
    asyncio.run(announce(args.address, args.hostname, args.port, services))
    return 0


if __name__ == "__main__":
    sys.exit(main())

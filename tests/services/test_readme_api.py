"""The README's Python API example runs as written against a simulated host over real SSH."""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimSshHostFactory

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_api_section() -> str:
    """The README's "Python API" section, up to the next heading."""
    return README.read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]


@dataclass(frozen=True)
class DocumentedCall:
    """One call the README's method table names: `owner.name(params)`, documented sync or not."""

    area: str
    owner: str | None  # a module for a module-level function; None: a method of fleet.open()'s
    name: str
    params: tuple[str, ...]  # as shown, without "=" and defaults
    sync: bool


_CALL = re.compile(r"`(?P<dotted>[\w.]+)\((?P<params>[^)]*)\)`(?P<after>[^`]*)")


def readme_method_table() -> list[DocumentedCall]:
    """Every call in the README's "area | methods" table.

    A cell lists the session's methods up to its first "; "; what follows names module-level
    functions, a dotted name giving the module of the bare names after it. A method is async
    unless "(sync" follows it.
    """
    calls: list[DocumentedCall] = []
    rows = [line for line in readme_api_section().splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| area | methods"), "the method table moved or changed"
    for row in rows[1:]:
        area, cell = (part.strip() for part in row.strip("|").split("|", 1))
        methods, _, functions = cell.partition("; ")
        for match in _CALL.finditer(methods):
            calls.append(DocumentedCall(
                area, None, match["dotted"], _shown_params(match["params"]),
                sync=match["after"].lstrip().startswith("(sync")))
        module = None
        for match in _CALL.finditer(functions):
            dotted = match["dotted"]
            if "." in dotted:
                module, _, dotted = dotted.rpartition(".")
            assert module is not None, f"{dotted}: no module named before it in {row!r}"
            calls.append(DocumentedCall(area, module, dotted, _shown_params(match["params"]),
                                        sync=True))
    return calls


def _shown_params(text: str) -> tuple[str, ...]:
    return tuple(part.split("=", 1)[0].strip() for part in text.split(",") if part.strip())


def _undocumented(call: DocumentedCall, target: Callable[..., object]) -> list[str]:
    """What the README says of `call` that `target` does not do."""
    problems: list[str] = []
    parameters = inspect.signature(target).parameters
    for param in call.params:
        if param not in parameters:
            problems.append(f"{call.name}({param}): no such parameter; it takes "
                            f"({', '.join(parameters)})")
    is_async = inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)
    if is_async == call.sync:
        problems.append(f"{call.name} is {'async' if is_async else 'sync'} but the README says "
                        f"{'sync' if call.sync else 'async'}")
    return problems


async def test_readme_method_table_matches_the_session_it_documents(tmp_path: Path) -> None:
    import importlib

    import fleet

    calls = readme_method_table()
    areas = {call.area for call in calls}
    assert {"hosts", "live", "history", "placement", "tasks", "discovery", "database"} <= areas
    assert len([call for call in calls if call.owner is None]) >= 30  # the whole table was read
    problems: list[str] = []
    async with fleet.open(str(tmp_path / "fleet.db"), tmp_path / "inventory.yaml") as session:
        for call in calls:
            owner = session if call.owner is None else importlib.import_module(call.owner)
            target = getattr(owner, call.name, None)
            if not callable(target):
                problems.append(f"{call.owner or 'fleet.open()'} has no {call.name}")
                continue
            problems.extend(_undocumented(call, target))
    assert problems == [], "\n".join(problems)
    opened = re.search(r"`fleet\.open\((?P<params>[^)]*)\)`", readme_api_section())
    assert opened is not None, "the README no longer shows fleet.open's parameters"
    shown = tuple(name for name in _shown_params(opened["params"]) if name != "*")
    assert shown == tuple(inspect.signature(fleet.open).parameters)


def test_the_table_reader_sees_a_wrong_parameter_name() -> None:
    async def release(allocation_ids: list[int], *, force: bool = False) -> None:
        del allocation_ids, force

    wrong = DocumentedCall("placement", None, "release", ("ids",), sync=False)
    right = DocumentedCall("placement", None, "release", ("allocation_ids", "force"), sync=False)
    assert _undocumented(wrong, release) == [
        "release(ids): no such parameter; it takes (allocation_ids, force)"]
    assert _undocumented(right, release) == []
    assert _undocumented(replace(right, sync=True), release) == [
        "release is async but the README says sync"]


def readme_api_example() -> str:
    """The first ```python block of the README's "Python API" section."""
    section = README.read_text().split("## Python API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README's Python API section has no python example"
    return match.group(1)


async def test_readme_python_api_example_runs(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
) -> None:
    config = fleet_cli.home / "gpu01.gpus.conf"
    write_config(config, scenarios.idle(2, host="gpu01"))
    handle = await sim_ssh_host("gpu01", env=sim_tools.env(config))
    spec = handle.spec
    (fleet_cli.home / "inventory.yaml").write_text(
        f"hosts:\n  gpu01:\n    address: {spec.address}\n    port: {spec.port}\n"
        f"    user: {spec.user}\n    identity_file: {spec.identity_file}\n")
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"
    pinned.parent.mkdir(parents=True)
    pinned.write_text(handle.known_hosts_line + "\n")

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", readme_api_example(), cwd=fleet_cli.home, env=fleet_cli.env(),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)

    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("gpu01 up "), lines
    assert any("gpu01" in line and "GPU" in line for line in lines[1:2]), lines
    assert lines[-1].endswith("hourly points"), lines

"""Check a task's environment on its host before the start, and record what it will run in."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from fleet.dispatch.environment import CHECK_EXIT
from fleet.errors import DispatchError
from fleet.ssh.run import output_tail

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.dispatch.remote import TaskHost
    from fleet.dispatch.request import DispatchRequest

CHECK_TIMEOUT_S = 60.0  # conda's own start-up and a docker daemon's answer take seconds


async def ready_on_host(database: Database, host: TaskHost, request: DispatchRequest,
                        task_id: int) -> DispatchRequest:
    """`request` with its environment checked on `host` (the conda or runtime found there),
    recorded in the task's constraints; DispatchError naming the host when it cannot be used."""
    from fleet.dispatch import records

    environment = request.environment
    if environment is None:
        return request
    result = await host.run(environment.check_command(),
                            timeout=max(CHECK_TIMEOUT_S, host.command_timeout))
    output = result.stdout.decode("utf-8", "replace")
    if result.exit_status == CHECK_EXIT:
        reason = output.strip().splitlines()[-1] if output.strip() else "refused"
        raise DispatchError(f"{host.spec.name}: cannot run in {environment.option}: {reason}")
    try:
        if result.exit_status != 0:
            raise ValueError(f"exit {result.exit_status}")
        checked = environment.checked(output)
    except ValueError as exc:
        tail = output_tail(result.stdout, result.stderr)
        raise DispatchError(f"{host.spec.name}: cannot check {environment.option} ({exc})"
                            + (f": {tail}" if tail else "")) from exc

    def record() -> None:
        constraints = dict(records.load(database, task_id).constraints)
        constraints["environment"] = checked.to_dict() | {"host": host.spec.name}
        records.set_fields(database, task_id, constraints=constraints)

    await asyncio.to_thread(record)
    return replace(request, environment=checked)

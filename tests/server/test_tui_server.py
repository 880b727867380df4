"""`fleet tui` on a `fleet serve`: the server's live view, history, reservations and placement
previews through its socket; discovery stays on the head node."""

from __future__ import annotations

import json

import pytest

from fleet.errors import ConfigError
from tests.server.conftest import ServeLabFactory
from tests.tui.conftest import settle
from tests.tui.test_end_to_end import wait_until
from tui.adapter import FleetAdapter
from tui.app import FleetApp
from tui.screens.dispatch import DispatchScreen
from tui.screens.host_detail import HostDetailScreen
from tui.service import DispatchRequest
from tui.widgets.fleet_table import FleetTable

pytestmark = pytest.mark.slow


async def test_the_tui_shows_the_servers_view_and_acts_through_it(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    server = await lab.serve()
    (lab.cli.home / "train.py").write_text("print('hi')\n")
    async with lab.remote(server) as remote:
        adapter = FleetAdapter(remote, scripts=[str(lab.cli.home / "train.py")])
        app = FleetApp(adapter)
        async with app.run_test(size=(120, 36)) as pilot:
            table = app.screen.query_one(FleetTable)

            async def both_up() -> bool:
                return {k for k in table._order
                        if str(table.get_cell(k, "state")) == "up"} == {"gpu1", "gpu2"}

            await wait_until(pilot, both_up, "both hosts up, as the server's monitor sees them")
            table.move_cursor(row=table._order.index("gpu1"))
            await pilot.press("enter")
            await settle(pilot)
            detail = app.screen
            assert isinstance(detail, HostDetailScreen)

            async def history_loaded() -> bool:
                detail.load_history()
                await settle(pilot)
                return bool(detail.history)

            await wait_until(pilot, history_loaded, "history read through the server")
            assert sorted(detail.history) == [0, 1]
            await pilot.press("escape", "d")
            await settle(pilot)
            dialog = app.screen
            assert isinstance(dialog, DispatchScreen)

            async def previewed() -> bool:
                if dialog.preview is None or not dialog.preview.feasible:
                    dialog.ask_preview()
                    await settle(pilot)
                return dialog.preview is not None and dialog.preview.feasible

            await wait_until(pilot, previewed, "a placement preview from the server")
            assert dialog.preview is not None and dialog.preview.host in {"gpu1", "gpu2"}
            await pilot.press("escape", "q")

        made = await adapter.reserve("gpu1", [1], duration_s=60, note="from the tui")
        assert [(view.host, view.gpu_index, view.note) for view in made] == \
            [("gpu1", 1, "from the tui")]
        assert made[0].owner == (await remote.whoami()).user
        nothing = await adapter.preview(DispatchRequest(script="x.py", gpus=3))
        assert not nothing.feasible and any("gpu1" in line for line in nothing.exclusions)
        with pytest.raises(ConfigError, match="runs where fleet serve runs"):
            await adapter.scan()
    listed = json.loads((await lab.run("--json", "allocations")).stdout)["allocations"]
    assert [(row["host"], row["gpu"]) for row in listed] == [("gpu1", 1)]


async def test_fleet_tui_through_the_server_refuses_local_only_options(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    interval = await lab.run("tui", "--interval", "2s")
    assert interval.returncode == 2 and "server's monitor" in interval.stderr
    typo = await lab.run("tui", "--hosts", "nope")
    assert typo.returncode == 2 and "nope" in typo.stderr

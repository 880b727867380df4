"""Regenerate docs/screenshots/*.svg and *.png from the fake fleet (120×36, frozen time).

    .venv/bin/python -m tests.tui.make_screenshots     # needs rsvg-convert (librsvg2-bin)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp

OUT = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SHOTS = {
    "overview": (),
    "overview-expanded": ("down", "down", "space", "up", "space"),
    "host-detail": ("down", "down", "enter"),
    "tasks": ("t", "enter"),
    "dispatch": ("d", "enter"),
    "events": ("e",),
}


async def shoot(name: str, keys: tuple[str, ...]) -> Path:
    app = FleetApp(FakeService(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        svg = Path(app.save_screenshot(f"{name}.svg", str(OUT)))
    # rsvg needs xml:space="preserve" to keep the runs of spaces Textual's SVG relies on
    text = svg.read_text().replace("<svg ", '<svg xml:space="preserve" ', 1)
    svg.write_text(text)
    png = svg.with_suffix(".png")
    subprocess.run(["rsvg-convert", str(svg), "-o", str(png)], check=True, timeout=60)
    return png


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, keys in SHOTS.items():
        print(asyncio.run(shoot(name, keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

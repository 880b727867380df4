"""Discovery candidates: hosts seen on the network; adopt one after confirming its host key."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static

from fleet.errors import FleetError
from tui import format as fmt
from tui.messages import ActionDone, CandidatesLoaded, CandidatesScanned, FingerprintFetched
from tui.screens.base import FleetScreen, report_failure
from tui.screens.confirm import ConfirmScreen
from tui.service import CandidateView, DiscoveryScope, HostKeyFingerprint
from tui.widgets.keyed_table import KeyedTable

CANDIDATE_COLUMNS = (("name", "Name", 18), ("address", "Address", 22), ("source", "Seen via", 16),
                     ("gpus", "GPUs", 18), ("state", "State", 8), ("seen", "Seen", 6))
REFRESH_S = 5.0


class DiscoveryScreen(FleetScreen):
    """Candidates from mDNS (and other sources) that are not in the fleet yet."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "scan", "Scan now"),
        Binding("escape", "app.switch_mode('fleet')", "Fleet", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.candidates: dict[str, CandidateView] = {}
        self.scanning = False

    def compose(self) -> ComposeResult:
        yield Static("Discovery — Enter: adopt the candidate (you confirm its host key first)"
                     " · s: scan now", id="discovery-title")
        yield Static(id="discovery-empty")
        yield KeyedTable(CANDIDATE_COLUMNS, id="candidates")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(KeyedTable).focus()
        self.query_one("#discovery-empty", Static).display = False
        self.load()
        self.set_interval(REFRESH_S, self.load)

    @work(exclusive=True, group="candidates")
    async def load(self) -> None:
        try:
            candidates = await self.service.candidates()
            scope = await self.service.discovery_scope()
        except FleetError as exc:
            report_failure(self, "list discovery candidates", exc)
            return
        self.post_message(CandidatesLoaded(candidates, scope))

    @on(CandidatesLoaded)
    def loaded(self, message: CandidatesLoaded) -> None:
        now = self.now()
        self.candidates = {c.key: c for c in message.candidates}
        self.query_one(KeyedTable).sync({c.key: _cells(c, now) for c in message.candidates})
        empty = self.query_one("#discovery-empty", Static)
        empty.display = not message.candidates
        if not message.candidates:
            empty.update(empty_explanation(message.scope))

    def refresh_data(self) -> None:
        self.load()

    def action_scan(self) -> None:
        if self.scanning:
            return
        self.scanning = True
        self.notify("scanning the network for a few seconds…", timeout=3)
        self.scan()

    @work(exclusive=True, group="scan")
    async def scan(self) -> None:
        try:
            found = await self.service.scan()
        except FleetError as exc:
            report_failure(self, "scan the network", exc)
            self.post_message(CandidatesScanned(-1))
            return
        self.post_message(CandidatesScanned(len(found)))

    @on(CandidatesScanned)
    def scanned(self, message: CandidatesScanned) -> None:
        self.scanning = False
        if message.found >= 0:
            self.post_message(ActionDone(f"scan done: {message.found} host(s) answered"))

    @on(DataTable.RowSelected)
    def adopt(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = self.query_one(KeyedTable).selected_key
        candidate = self.candidates.get(key) if key else None
        if candidate is None:
            return
        if candidate.state == "adopted":
            self.notify(f"{candidate.name} is already in the fleet",
                        severity="warning", markup=False)
            return
        self.fetch_fingerprint(candidate)

    @work(exclusive=True, group="fingerprint")
    async def fetch_fingerprint(self, candidate: CandidateView) -> None:
        try:
            fingerprint = await self.service.host_key(candidate.key)
        except FleetError as exc:
            report_failure(self, f"fetch the host key of {candidate.name}", exc)
            return
        self.post_message(FingerprintFetched(candidate, fingerprint))

    @on(FingerprintFetched)
    def confirm_fingerprint(self, message: FingerprintFetched) -> None:
        candidate, fingerprint = message.candidate, message.fingerprint

        def decided(confirmed: bool | None) -> None:
            if confirmed:
                self.adopt_confirmed(candidate, fingerprint)

        self.app.push_screen(ConfirmScreen(
            f"Adopt {candidate.name} ({candidate.address}:{candidate.port})?",
            f"Its SSH host key is\n\n  {fingerprint.key_type} {fingerprint.sha256}\n\n"
            "Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) "
            "before saying yes: the key will be pinned and trusted from now on.",
            yes_label="Adopt"), decided)


    @work(group="actions")
    async def adopt_confirmed(self, candidate: CandidateView,
                              fingerprint: HostKeyFingerprint) -> None:
        """Adopt pinning exactly the confirmed key; report the name the host is managed as."""
        try:
            name = await self.service.adopt(candidate.key, fingerprint)
        except FleetError as exc:
            report_failure(self, f"adopt {candidate.name}", exc)
            return
        self.post_message(ActionDone(f"adopted {candidate.address}:{candidate.port} as {name}: "
                                     "host key pinned, host added"))


def empty_explanation(scope: DiscoveryScope) -> Text:
    """What the screen says while no candidate is known: what discovery does, where, how."""
    where = ", ".join(scope.interfaces) if scope.interfaces else "every network interface"
    text = Text("No candidates yet.\n\n", style="bold")
    text.append(
        "Discovery lists hosts that announce themselves on the local network over mDNS "
        "(ZeroConf) and are not in the fleet yet. It browses for "
        f"{', '.join(scope.service_types)} on {where} "
        "(settings.discovery.interfaces in the inventory narrows that).\n\n"
        "Press s to scan now (a few seconds), or run `fleet discover` in a shell. Hosts "
        "that do not announce themselves can always be added to the inventory file.")
    return text


def _cells(candidate: CandidateView, now: float) -> tuple[object, ...]:
    style = {"seen": "green", "gone": "grey50", "adopted": "cyan"}.get(candidate.state, "")
    return (
        fmt.clip(candidate.name, 18),
        fmt.clip(f"{candidate.address}:{candidate.port}", 22),
        fmt.clip(candidate.source, 16),
        fmt.clip(candidate.gpu_summary or "–", 18),
        Text(candidate.state, style=style),
        fmt.age(now - candidate.last_seen) if candidate.last_seen is not None else "–",
    )

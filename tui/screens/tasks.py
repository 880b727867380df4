"""Tasks: queued/running/finished tasks (sacct-like), the selected task's live log, cancel."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Log, Static

from fleet.errors import FleetError
from tui import format as fmt
from tui.messages import LogLines, TasksLoaded
from tui.screens.base import FleetScreen, report_failure
from tui.screens.confirm import ConfirmScreen
from tui.service import TaskView
from tui.widgets.keyed_table import KeyedTable

TASK_COLUMNS = (("id", "ID", 5), ("name", "Name", 16), ("state", "State", 10),
                ("host", "Host", 12), ("gpus", "GPUs", 6), ("owner", "Owner", 8),
                ("elapsed", "Elapsed", 9), ("exit", "Exit", 4), ("submitted", "Submitted", 9))
STATE_STYLES = {"running": "green", "succeeded": "cyan", "failed": "bold red",
                "cancelled": "magenta", "lost": "bold red", "queued": "yellow"}
REFRESH_S = 2.0
MAX_LOG_LINES = 2000


class TasksScreen(FleetScreen):
    """The task table above the log of the selected task."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "cancel_task", "Cancel task"),
        Binding("escape", "app.switch_mode('fleet')", "Fleet", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.tasks: dict[int, TaskView] = {}
        self.followed: int | None = None
        self._select_when_listed: int | None = None  # a task to put the cursor on once listed

    def compose(self) -> ComposeResult:
        yield Static("Tasks — Enter: follow log · x: cancel · d: dispatch", id="tasks-title")
        yield KeyedTable(TASK_COLUMNS, id="tasks")
        yield Static("log: select a task and press Enter", id="log-title")
        yield Log(id="task-log", max_lines=MAX_LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tasks", KeyedTable).focus()
        self.load_tasks()
        self.set_interval(REFRESH_S, self.load_tasks)
        if self.followed is not None:
            self._start_following(self.followed, self.tasks.get(self.followed))

    @work(exclusive=True, group="tasks")
    async def load_tasks(self) -> None:
        try:
            tasks = await self.service.tasks()
        except FleetError as exc:
            report_failure(self, "list tasks", exc)
            return
        self.post_message(TasksLoaded(tasks))

    @on(TasksLoaded)
    def tasks_loaded(self, message: TasksLoaded) -> None:
        now = self.now()
        self.tasks = {t.task_id: t for t in message.tasks}
        table = self.query_one("#tasks", KeyedTable)
        table.sync({str(t.task_id): _task_cells(t, now) for t in message.tasks})
        wanted = self._select_when_listed
        if wanted is not None and str(wanted) in table.rows_by_key:
            self._select_when_listed = None
            table.move_cursor(row=table.get_row_index(str(wanted)))

    def follow_task(self, task: TaskView) -> None:
        """Follow `task`'s log now (a task just submitted) and select it once it is listed."""
        self.tasks.setdefault(task.task_id, task)
        self.followed = task.task_id
        self._select_when_listed = task.task_id
        if self.is_mounted:
            self._start_following(task.task_id, task)
            self.load_tasks()

    def selected_task(self) -> TaskView | None:
        """The task under the cursor."""
        key = self.query_one("#tasks", KeyedTable).selected_key
        return self.tasks.get(int(key)) if key is not None else None

    @on(DataTable.RowSelected, "#tasks")
    def follow(self, event: DataTable.RowSelected) -> None:
        event.stop()
        task = self.selected_task()
        if task is None:
            return
        self.followed = task.task_id
        self._start_following(task.task_id, task)

    def _start_following(self, task_id: int, task: TaskView | None) -> None:
        self.query_one("#task-log", Log).clear()
        name = f" ({fmt.safe_cell(task.name)})" if task is not None else ""
        self.query_one("#log-title", Static).update(
            Text(f"log of task {task_id}{name} — following", style="bold"))
        self.follow_log(task_id)

    @work(exclusive=True, group="log")
    async def follow_log(self, task_id: int) -> None:
        try:
            async for line in self.service.log_tail(task_id):
                self.post_message(LogLines(task_id, [line]))
        except FleetError as exc:
            report_failure(self, f"log of task {task_id}", exc)

    @on(LogLines)
    def log_lines(self, message: LogLines) -> None:
        if message.task_id == self.followed:
            self.query_one("#task-log", Log).write_lines(
                [str(fmt.safe_cell(line)) for line in message.lines])

    def action_cancel_task(self) -> None:
        task = self.selected_task()
        if task is None:
            return
        if not task.is_active:
            self.notify(f"task {task.task_id} already {task.state}",
                        severity="warning", markup=False)
            return
        task_id, service = task.task_id, self.service

        def decided(confirmed: bool | None) -> None:
            if confirmed:
                self.perform(f"cancel task {task_id}", lambda: service.cancel(task_id),
                             f"cancelled task {task_id}")

        self.app.push_screen(ConfirmScreen(
            f"Cancel task {task_id} ({task.name}) on {task.host or 'no host yet'}?",
            "Its process group gets SIGTERM, then SIGKILL after a grace period.",
            yes_label="Cancel task"), decided)

    def refresh_data(self) -> None:
        self.load_tasks()


def _task_cells(task: TaskView, now: float) -> tuple[Text | str, ...]:
    end = task.ended_at if task.ended_at is not None else now
    elapsed = end - task.started_at if task.started_at is not None else None
    return (
        str(task.task_id),
        fmt.clip(task.name, 16),
        Text(task.state, style=STATE_STYLES.get(task.state, "")),
        fmt.clip(task.host or "–", 12),
        ",".join(map(str, task.gpus)) or "–",
        fmt.clip(task.owner, 8),
        fmt.duration(elapsed),
        "–" if task.exit_code is None else str(task.exit_code),
        fmt.age(now - task.submitted_at) if task.submitted_at is not None else "–",
    )

"""fleet's exit codes: one constant per meaning, and the table `fleet --help` shows."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_HOST_FAILED = 3
EXIT_STORAGE = 4
EXIT_DISPATCH = 5
EXIT_CONFLICT = 6
EXIT_NO_PLACEMENT = 7
EXIT_NOT_PERMITTED = 8
EXIT_SERVER = 9
EXIT_TIMED_OUT = 124
EXIT_INTERRUPTED = 130

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success (dispatch, logs -f: the script's own exit code)"),
    (EXIT_FAILED, "unexpected error; db check found problems; run: a command failed"),
    (EXIT_BAD_INPUT, "bad input: usage, inventory, settings, unknown host/GPU/allocation/task"),
    (EXIT_HOST_FAILED, "a host could not be reached, authenticated or probed; host key refused"),
    (EXIT_STORAGE, "storage: the database cannot be opened, migrated or written; serve, "
                   "monitor: lost the lead or the recorder lock"),
    (EXIT_DISPATCH, "dispatch: the task could not start, or was lost; a refused release"),
    (EXIT_CONFLICT, "allocation conflict: a GPU is held already, or was drained meanwhile"),
    (EXIT_NO_PLACEMENT, "no GPU fits the request (with --wait: the queue timeout passed); over "
                        "a limit"),
    (EXIT_NOT_PERMITTED, "not permitted: someone else's task/reservation, or admin-only (serve)"),
    (EXIT_SERVER, "the selected fleet server cannot be reached, or went away mid-command"),
    (EXIT_TIMED_OUT, "dispatch: the task hit --timeout"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); dispatch: the task was cancelled"),
)


def task_exit_code(state: str, exit_code: int | None, timed_out: bool) -> int:
    """The code `fleet dispatch` and `fleet logs -f` exit with for a task that ended (not lost)."""
    if state == "cancelled":
        return EXIT_INTERRUPTED
    if timed_out:
        return EXIT_TIMED_OUT
    return exit_code if exit_code is not None else EXIT_FAILED


def render_exit_codes() -> str:
    """The exit-code table as aligned `code  meaning` lines."""
    return "\n".join(f"{code:>3}  {meaning}" for code, meaning in EXIT_CODES)

"""task_sessions: the session id (remote_pid) of every starting or running task, read by the
monitor's housekeeping through plain SQL on either backend."""

from __future__ import annotations

from db.engine import Database
from db.task_runs import task_sessions
from db.tasks import create_task, update_task


def test_only_starting_and_running_tasks_with_a_session_are_listed(database: Database) -> None:
    ids = {}
    with database.session() as session:
        for name, state, pid in (("run", "running", 4242), ("start", "starting", 77),
                                 ("early", "starting", None), ("queued", "queued", None),
                                 ("done", "succeeded", 99)):
            ids[name] = create_task(session, name=name, script="t.py", args=[],
                                    gpus_requested=1, owner="me", now=1000)
            update_task(session, ids[name], state=state, remote_pid=pid)
    with database.reader() as reader:
        assert task_sessions(reader) == {ids["run"]: 4242, ids["start"]: 77}

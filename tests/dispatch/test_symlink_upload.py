"""A script or --with file that is a symbolic link is uploaded as the file it names: a link
would name a path on the host, outside the task directory, and fleet's chmod changed it."""

from __future__ import annotations

import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]


async def test_a_linked_script_and_file_are_sent_as_files(dispatch_lab: LabFactory,
                                                          tmp_path: Path) -> None:
    lab = await dispatch_lab(1)
    target = tmp_path / "real.sh"
    target.write_text("cat data.txt\n")
    target.chmod(0o644)
    data = tmp_path / "data.txt"
    data.write_text("from the linked file\n")
    data.chmod(0o644)
    link = lab.cli.home / "link.sh"
    link.symlink_to(target)  # absolute
    with_link = lab.cli.home / "data.txt"
    with_link.symlink_to(data)
    result = await lab.cli.run("dispatch", "--with", str(with_link), str(link))
    assert result.returncode == 0, result.stderr
    assert "from the linked file" in result.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not 0600: fleet left it alone
    assert stat.S_IMODE(data.stat().st_mode) == 0o644
    task_dir = Path(str((await _tasks(lab))[0]["remote_dir"]))
    for name in ("link.sh", "data.txt"):
        assert (task_dir / name).is_file() and not (task_dir / name).is_symlink(), name

    target.write_text("echo ran\n")
    ran = await lab.cli.run("run", "--hosts", "gpu1", str(link))
    assert ran.returncode == 0 and "ran" in ran.stdout, ran.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not 0700

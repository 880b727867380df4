"""A dispatch request packed with its files for `fleet serve`, and staged again on the server."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from fleet.dispatch.request import DispatchRequest
from fleet.dispatch.spec import plan_uploads
from fleet.dispatch.staging import pack, stage
from fleet.errors import ConfigError
from fleet.placement.request import PlacementRequest
from fleet.wire.codec import WireError, decode, encode
from fleet.wire.dispatch import SubmitRequest, UploadEntry


def _tree(base: Path) -> DispatchRequest:
    script = base / "run.sh"
    script.write_text("echo hi\n")
    tool = base / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (base / "data" / "deep").mkdir(parents=True)
    (base / "data" / "deep" / "a.bin").write_bytes(bytes(range(256)))
    (base / "data" / "link").symlink_to(base / "data" / "deep" / "a.bin")
    return DispatchRequest(script, PlacementRequest(gpus=2, policy="packed"),
                           args=("x", "y z"), extras=(tool, base / "data"),
                           env=(("A", "1"),), timeout_s=5.0, wait=True, priority=3)


def test_staged_request_uploads_what_the_client_would(tmp_path: Path) -> None:
    client, server = tmp_path / "client", tmp_path / "server"
    client.mkdir(), server.mkdir()
    request = _tree(client)
    wire = decode(encode(pack(request, follow=True)), SubmitRequest)  # through JSON
    staged = stage(wire, server)

    def uploads(req: DispatchRequest) -> list[tuple[str, bytes | None, int]]:
        """(path in the task directory, content, owner-execute bit) of each upload."""
        return [(item.remote, item.local.read_bytes() if item.local else None,
                 item.local.stat().st_mode & 0o100 if item.local else 0)
                for item in plan_uploads(req.script, req.extras)]

    assert uploads(staged) == uploads(request)
    assert all(item.local is None or item.local.is_relative_to(server)
               for item in plan_uploads(staged.script, staged.extras))
    assert staged.launch(1, "python3", ()).interpreter == ("bash",)
    assert (staged.args, staged.env, staged.timeout_s, staged.wait, staged.priority) == \
        (request.args, request.env, request.timeout_s, True, 3)
    assert staged.placement == request.placement
    assert staged.stored_constraints()["with"] == [str(client / "tool"), str(client / "data")]
    assert staged.shown_script == str(client / "run.sh") and staged.name == "run.sh"
    assert (server / "tool").stat().st_mode & 0o777 == 0o700  # owner bits only, +x kept
    assert not (server / "data" / "link").is_symlink()  # sent as a copy of its target


@pytest.mark.parametrize("path", ["../evil", "/etc/passwd", "a/../../b", ".fleet/wrapper.sh",
                                  "", "a//b", "./x"])
def test_unsafe_paths_are_refused(tmp_path: Path, path: str) -> None:
    wire = SubmitRequest(files=(UploadEntry("run.sh", b"x"), UploadEntry(path, b"y")),
                         extras=(), shown_script="run.sh", shown_extras=(), placement={})
    with pytest.raises(ConfigError, match="not a safe path"):
        stage(wire, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["run.sh"]


def test_a_file_before_its_directory_is_refused(tmp_path: Path) -> None:
    wire = SubmitRequest(files=(UploadEntry("run.sh", b"x"), UploadEntry("d/f", b"y")),
                         extras=("d",), shown_script="run.sh", shown_extras=("d",),
                         placement={})
    with pytest.raises(ConfigError, match="its directory was not sent first"):
        stage(wire, tmp_path)


def test_bad_env_and_unknown_fields_are_refused(tmp_path: Path) -> None:
    wire = SubmitRequest(files=(UploadEntry("run.sh", b"x"),), extras=(),
                         shown_script="run.sh", shown_extras=(), placement={},
                         env=(("CUDA_VISIBLE_DEVICES", "0"),))
    with pytest.raises(ConfigError, match="fleet sets this variable itself"):
        stage(wire, tmp_path)
    with pytest.raises(WireError, match="owner"):
        decode(encode({**msgspec.to_builtins(wire), "owner": "mallory"}), SubmitRequest)

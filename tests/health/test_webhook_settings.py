"""Webhook settings: validation with file:line (exit 2), URL redaction everywhere it is shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.health.secret_url import redact_secret_url, scrub
from fleet.health.webhook_settings import Webhook
from fleet.monitor.config import load_settings
from tests.fixtures.cli import FleetCli

SLACK = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"


@pytest.mark.parametrize(("url", "shown"), [
    (SLACK, "https://hooks.slack.com/services/***"),
    ("https://discord.com/api/webhooks/123/TOKENSECRET", "https://discord.com/api/***"),
    ("https://user:SECRET@example.com:8443/", "https://***@example.com:8443/"),
    ("https://example.com/notify?token=SECRET#SECRET", "https://example.com/***?***#***"),
    ("https://example.com/SECRETTOPIC", "https://example.com/***"),
    ("https://example.com", "https://example.com"),
    ("http://[::1]:8080/a/SECRET", "http://[::1]:8080/a/***"),
    ("http://example.com:notaport/SECRET", "***"),
])
def test_redaction_hides_userinfo_path_tokens_and_query(url: str, shown: str) -> None:
    assert redact_secret_url(url) == shown
    assert "SECRET" not in redact_secret_url(url)


def test_scrub_replaces_the_url_inside_error_texts() -> None:
    text = (f"Cannot connect to host hooks.slack.com:443 for {SLACK}: refused "
            "(/services/T000/B000/XXXXSECRET)")
    assert "SECRET" not in scrub(text, SLACK)
    assert "https://hooks.slack.com/services/***" in scrub(text, SLACK)


@pytest.mark.parametrize(("entry", "line", "why"), [
    ("url: ftp://example.com/drop", 4, "must be an http:// or https:// URL with a host"),
    ("url: hooks.slack.com/services/T0/B0/X", 4, "must be an http:// or https:// URL"),
    ("url: https://example.com/x\n      format: xml", 4, "format 'xml' is not one of json, slack"),
    ("url: https://example.com/x\n      kinds: [\"gpu-[hot\"]", 4, "kind 'gpu-[hot' is not an"),
    ("url: https://example.com/x\n      min_severity: loud", 4, "min_severity 'loud'"),
    ("url: https://example.com/x\n      colour: red", 5, "unknown key 'colour'"),
])
def test_bad_webhooks_are_settings_errors_with_file_and_line(
        tmp_path: Path, entry: str, line: int, why: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"hooks:\n  timeout_s: 5\n  webhooks:\n    - {entry}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_path=path)
    assert caught.value.exit_code == 2
    # The webhook's own line, or the line of an unknown key in it.
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert why in str(caught.value)


def test_webhooks_load_with_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"hooks:\n  webhook_poll_s: 500ms\n  webhooks:\n    - url: {SLACK}\n"
                    "      kinds: [\"task_*\", gpu_hot, host_down]\n"
                    "      min_severity: warning\n      format: slack\n      deadline_s: 2m\n")
    hooks = load_settings(config_path=path).hooks
    assert hooks.webhook_poll_s == 0.5
    assert hooks.webhooks == (Webhook(SLACK, kinds=("task_*", "gpu_hot", "host_down"),
                                      min_severity="warning", format="slack",
                                      deadline_s=120.0),)
    assert hooks.webhooks[0].wants({"kind": "TASK_ENDED", "severity": "error"})
    assert not hooks.webhooks[0].wants({"kind": "task_ended", "severity": "info"})


async def test_config_show_redacts_and_a_bad_url_exits_2(fleet_cli: FleetCli) -> None:
    config_dir = fleet_cli.home / ".config" / "fleet"
    config_dir.mkdir(parents=True)
    config = config_dir / "config.yaml"
    config.write_text(f"hooks:\n  webhooks:\n    - url: {SLACK}\n      format: slack\n")
    for arguments in (("config", "show"), ("--json", "config", "show")):
        shown = await fleet_cli.run(*arguments)
        assert shown.returncode == 0, shown.stderr
        assert "https://hooks.slack.com/services/***" in shown.stdout
        assert "SECRET" not in shown.stdout
    config.write_text("hooks:\n  webhooks:\n    - url: file:///etc/passwd\n")
    refused = await fleet_cli.run("config", "show")
    assert refused.returncode == 2
    assert "config.yaml:3:" in refused.stderr and "http:// or https://" in refused.stderr

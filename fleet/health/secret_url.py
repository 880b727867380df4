"""Redacting the secrets a webhook URL carries (user info, path tokens, query) for messages.

Webhook services put their credential in the URL itself: Slack and Mattermost in the path
(`/services/T000/B000/XXXX`), Discord in the path (`/api/webhooks/ID/TOKEN`), others in the
query string (`?token=...`) or as user info (`https://user:pass@host/`). What is shown keeps the
scheme, host, port and the first path segment when more follow, so a reader still sees which
service it is: `https://hooks.slack.com/services/***`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

REDACTED = "***"


def redact_secret_url(url: str) -> str:
    """`url` with user info, every path segment after the first, query and fragment hidden."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a malformed port
    except ValueError:
        return REDACTED  # unparsable: nothing of it is known to be safe to show
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc}"
    segments = [segment for segment in parts.path.split("/") if segment]
    if len(segments) > 1:
        path = f"/{segments[0]}/{REDACTED}"
    elif segments:
        path = f"/{REDACTED}"
    else:
        path = parts.path
    shown = f"{parts.scheme}://{netloc}{path}" if parts.scheme else f"{netloc}{path}"
    if parts.query:
        shown += f"?{REDACTED}"
    if parts.fragment:
        shown += f"#{REDACTED}"
    return shown


def scrub(text: str, url: str) -> str:
    """`text` (an error message) with every occurrence of `url` replaced by its redacted form."""
    if not url:
        return text
    redacted = redact_secret_url(url)
    scrubbed = text.replace(url, redacted)
    # Client libraries often print the URL without its query, or its path alone.
    parts = urlsplit(url)
    bare = url.split("?", 1)[0].split("#", 1)[0]
    if bare != url:
        scrubbed = scrubbed.replace(bare, redact_secret_url(bare))
    if parts.path and len(parts.path) > 1:
        scrubbed = scrubbed.replace(parts.path, REDACTED)
    return scrubbed

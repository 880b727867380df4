"""The Jinja2 templates of the web view (autoescaped: host, GPU and task text is never markup)."""

from __future__ import annotations

import datetime
import logging
import time
import zlib
from typing import TYPE_CHECKING, Any

from aiohttp import web

from fleet.textsafe import safe_text

if TYPE_CHECKING:
    import jinja2

log = logging.getLogger(__name__)

# Pages are served under this path on the socket and on `--web`'s port alike.
ROOT = "/web/"
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("web_templates")


def when(epoch_s: float | None) -> str:
    """An epoch time as "YYYY-MM-DD HH:MM:SS" UTC ("–" for none)."""
    if epoch_s is None:
        return "–"
    moment = datetime.datetime.fromtimestamp(epoch_s, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """Seconds as "1h02m", "3m04s" or "12s" ("–" for none)."""
    if seconds is None:
        return "–"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def shown_text(value: object) -> str:
    """Text from hosts, tasks and users as one line, control characters shown as "?"."""
    return "–" if value is None else safe_text(value, limit=1000)


def environment() -> jinja2.Environment:
    """The templates in fleet/web/templates, escaping every value unless a template says not."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fleet.web", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    env.filters["when"] = when
    env.filters["duration"] = duration
    env.filters["text"] = shown_text
    return env


def render(request: web.Request, name: str, *, status: int = 200,
           **context: Any) -> web.Response:
    """Template `name` with `context` as an HTML reply.

    Every template also gets `root` (where the pages are mounted), `now` (epoch s) and `page`
    (the name of the navigation entry to mark current).
    """
    context.setdefault("page", "")
    template = request.app[TEMPLATES].get_template(name)
    text = template.render(root=ROOT, now=time.time(), **context)
    return web.Response(text=text, status=status,
                        content_type="text/html")


# Bytes of a streamed page written at once: the browser draws the first rows meanwhile.
STREAM_CHUNK_BYTES = 64 * 1024
# gzip level of streamed pages: the 1,000-host overview's 0.7 MB go as ~30 kB (an SSH tunnel).
GZIP_LEVEL = 6


def accepts_gzip(request: web.Request) -> bool:
    """Whether the request's Accept-Encoding lists gzip (without q=0)."""
    for item in request.headers.get("Accept-Encoding", "").split(","):
        coding, *parameters = (part.strip().lower() for part in item.split(";"))
        if coding == "gzip":
            weight = next((p[2:] for p in parameters if p.startswith("q=")), "1")
            try:
                return float(weight) > 0
            except ValueError:
                return False
    return False


class _Encoder:
    """Page text as the bytes to send: UTF-8, gzip'ed when the browser accepts it, each chunk
    flushed (the browser can draw it now, not when zlib's buffer fills)."""

    def __init__(self, gzip: bool) -> None:
        self.zlib = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS) \
            if gzip else None

    def chunk(self, text: str) -> bytes:
        data = text.encode()
        if self.zlib is None:
            return data
        return self.zlib.compress(data) + self.zlib.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        return b"" if self.zlib is None else self.zlib.flush()


async def render_streamed(request: web.Request, name: str,
                          **context: Any) -> web.StreamResponse:
    """Like `render`, but written as the template produces it (a 1,000-host overview)."""
    from fleet.web.errors import SECURITY_HEADERS

    context.setdefault("page", "")
    template = request.app[TEMPLATES].get_template(name)
    encoder = _Encoder(accepts_gzip(request))
    headers = {**SECURITY_HEADERS, "Content-Type": "text/html; charset=utf-8",
               "Vary": "Accept-Encoding"}
    if encoder.zlib is not None:
        headers["Content-Encoding"] = "gzip"
    response = web.StreamResponse(headers=headers)
    parts = template.generate(root=ROOT, now=time.time(), **context)
    await response.prepare(request)
    buffered: list[str] = []
    size = 0
    try:
        for part in parts:
            buffered.append(part)
            size += len(part)
            if size >= STREAM_CHUNK_BYTES:
                await response.write(encoder.chunk("".join(buffered)))
                buffered, size = [], 0
        await response.write(encoder.chunk("".join(buffered)) + encoder.end())
        await response.write_eof()
    except ConnectionError as exc:  # the browser went away mid-page: nothing to answer
        log.info("web: %s went away mid-page: %s", request.path[:200], exc or type(exc).__name__)
    return response

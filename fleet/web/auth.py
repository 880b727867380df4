"""Who may read the web view: anyone on a loopback bind; elsewhere only holders of the token.

A request carries the token as `Authorization: Bearer TOKEN`, or as a cookie the server signs
after one visit to `?token=TOKEN` (that visit is redirected to the same URL without the token,
so it stays out of history and logs). Every refusal is a 401 and one line in the server's log.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from yarl import URL

from fleet.errors import ConfigError
from fleet.server.status_site import is_loopback, parse_listen_address
from fleet.web.errors import Handler, Middleware, error_page
from fleet.web.html import ROOT

log = logging.getLogger(__name__)

COOKIE = "fleet_web"
TOKEN_PARAM = "token"
MAX_TOKEN_BYTES = 4096
MIN_TOKEN_CHARS = 16
# A path the `?token=` visit may be sent back to: one '/' then printable ASCII, never '//' or
# '/\' (a browser reads those as another host). Anything else goes to the overview.
_SAME_ORIGIN_PATH = re.compile(r"/(?![/\\])[!-~]*")


@dataclass(frozen=True)
class WebBind:
    """Where the web view listens, and the token a request must show (None: loopback, none)."""

    host: str
    port: int
    token: str | None


def read_token(path: Path) -> str:
    """The token in `path` (surrounding whitespace removed); ConfigError if unusable.

    The file must be readable by its owner only: the token is a password.
    """
    try:
        info = path.stat()
        raw = path.read_bytes()[: MAX_TOKEN_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"--web-token-file {path}: {exc.strerror or exc}") from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"--web-token-file {path}: readable by others "
                          f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"--web-token-file {path}: the token must be ASCII") from None
    if len(raw) > MAX_TOKEN_BYTES or len(token) < MIN_TOKEN_CHARS or any(
            ch.isspace() for ch in token):
        raise ConfigError(f"--web-token-file {path}: expected one token of "
                          f"{MIN_TOKEN_CHARS} to {MAX_TOKEN_BYTES} characters, no spaces")
    return token


def web_bind(address: str, token_file: Path | None) -> WebBind:
    """`--web HOST:PORT` and `--web-token-file` checked: a non-loopback bind needs the token."""
    host, port = parse_listen_address(address)
    if token_file is None:
        if not is_loopback(host):
            raise ConfigError(f"--web {address}: {host} is not a loopback address; give "
                              "--web-token-file FILE (and put the page behind a TLS proxy)")
        return WebBind(host, port, None)
    return WebBind(host, port, read_token(token_file))


def cookie_value(token: str) -> str:
    """The signed session cookie for `token` (it proves the token without being it)."""
    return hmac.new(token.encode(), b"fleet web session v1", hashlib.sha256).hexdigest()


def _same(offered: str, expected: str) -> bool:
    """`offered` equals `expected`, compared in constant time as bytes. Headers arrive decoded
    with surrogate escapes, so bytes that are not UTF-8 compare (unequal) rather than fail."""
    return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8", "surrogateescape"))


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer ") and _same(header[7:].strip(), token):
        return True
    cookie = request.cookies.get(COOKIE)
    return cookie is not None and _same(cookie, cookie_value(token))


def _without_token(request: web.Request) -> str:
    """Where the `?token=` visit is sent: its own path and query less the token, when that path
    stays on this site; else the overview."""
    path = request.rel_url.raw_path
    if not _SAME_ORIGIN_PATH.fullmatch(path):
        return ROOT
    query = request.rel_url.query.copy()
    del query[TOKEN_PARAM]
    return str(URL.build(path=path, encoded=True).with_query(query))


def token_middleware(token: str) -> Middleware:
    """A middleware that lets through only requests that show `token`."""

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _authorized(request, token):
            return await handler(request)
        offered = request.query.get(TOKEN_PARAM)
        if offered is not None and _same(offered, token):
            redirect = web.Response(status=303, headers={"Location": _without_token(request)})
            redirect.set_cookie(COOKIE, cookie_value(token), httponly=True, samesite="Strict",
                                path="/")
            return redirect
        peer = request.remote or "?"
        log.warning("web: refused %s %s from %s: no valid token", request.method,
                    request.path[:200], peer)
        reply = error_page(401, "A token is needed",
                           "This fleet page needs its access token: open the link with "
                           "?token=… or send Authorization: Bearer ….")
        reply.headers["WWW-Authenticate"] = 'Bearer realm="fleet"'
        return reply

    return require_token

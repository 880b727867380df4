"""ProxyJump values (`[user@]host[:port],...`) as hops; no SSH library needed to check one."""

from __future__ import annotations

from fleet.model import HostSpec

MAX_JUMP_HOPS = 8


class BadJump(ValueError):
    """A ProxyJump value that names no usable hops; the message says what is wrong."""


def parse_jump(value: str) -> list[HostSpec]:
    """The hops of a ProxyJump value as HostSpecs (each named `[user@]host:port`)."""
    hops = []
    for raw in value.split(","):
        text = raw.strip().removeprefix("ssh://")
        user: str | None = None
        if "@" in text:
            user, text = text.rsplit("@", 1)
        port = 22
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            if rest.startswith(":"):
                port = _port(rest[1:], value)
        elif text.count(":") == 1:
            host, port_text = text.split(":")
            port = _port(port_text, value)
        else:
            host = text
        if not host:
            raise BadJump(f"invalid jump host {value!r}")
        hops.append(
            HostSpec(name=host_text_of(user, host, port), address=host, port=port, user=user)
        )
    if len(hops) > MAX_JUMP_HOPS:
        raise BadJump(f"too many jump hosts in {value!r} (at most {MAX_JUMP_HOPS})")
    return hops


def _port(text: str, value: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise BadJump(f"invalid port in jump host {value!r}")
    return int(text)


def host_text_of(user: str | None, address: str, port: int) -> str:
    """`[user@]host:port`, IPv6 addresses bracketed."""
    host = f"[{address}]" if ":" in address else address
    return f"{user + '@' if user else ''}{host}:{port}"

"""Per-user limits (the `limits:` settings): the most GPUs a user may hold at once (tasks and
reservations), the longest reservation, the most queued tasks; lifted or tightened per Unix
group. A group's value replaces the lab-wide one for its members; a user in several listed
groups gets the highest of their values.

A request over `max_gpus_per_user` waits with `--wait` (saying which limit holds it) or is
refused with exit 7 naming the limit; the check runs inside the claim's transaction, so racing
claims of one user cannot pass it together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from fleet.errors import ConfigError, NoPlacement
from fleet.monitor.settings import setting

if TYPE_CHECKING:
    from fleet.monitor.config import Settings

NO_LIMIT = 1_000_000


@dataclass(frozen=True)
class GroupLimits:
    """Limits of one Unix group's members (unset: the lab-wide value)."""

    max_gpus_per_user: int | None = setting(
        None, "the most GPUs one user may hold at once, tasks and reservations together "
        "[default: no limit]", minimum=0, maximum=NO_LIMIT)
    max_reservation: float | None = setting(
        None, "the longest a reservation may last (a reservation then needs --for) "
        "[default: no limit]", minimum=60.0, maximum=365 * 86400.0, duration=True)
    max_queued_per_user: int | None = setting(
        None, "the most tasks one user may have waiting in the queue [default: no limit]",
        minimum=0, maximum=NO_LIMIT)


@dataclass(frozen=True)
class LimitSettings(GroupLimits):
    """The `limits:` section: lab-wide limits, and `groups: {GROUP: {...}}` per Unix group."""

    groups: dict[str, GroupLimits] = setting(  # noqa: RUF009 (setting copies a mapping)
        {}, "per Unix group, limits for its members (a user in several: the highest wins)")


class LimitReached(NoPlacement):
    """A request over one of the caller's limits (exit 7); the message names the limit."""


@dataclass(frozen=True)
class UserLimits:
    """One user's limits, each with the setting it comes from (for messages)."""

    user: str
    values: dict[str, float | None] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def value(self, name: str) -> float | None:
        return self.values.get(name)

    def named(self, name: str) -> str:
        """`limits.max_gpus_per_user = 2` or `limits.groups.interns.max_gpus_per_user = 1`."""
        value = self.values.get(name)
        shown = f"{value:g}s" if name == "max_reservation" and value is not None else \
            f"{value:g}" if value is not None else "none"
        return f"{self.sources.get(name, f'limits.{name}')} = {shown}"

    @property
    def max_gpus(self) -> int | None:
        value = self.values.get("max_gpus_per_user")
        return None if value is None else int(value)


def limit_settings(settings: Settings) -> LimitSettings:
    """The `limits:` section; ConfigError (file:line) for a group this machine does not have."""
    from fleet.unix_groups import group_exists

    limits = settings.section("limits", LimitSettings)
    unknown = sorted(name for name in limits.groups if not group_exists(name))
    if unknown:
        where = settings.origins.get("limits.groups", "settings")
        raise ConfigError(f"{where}: limits.groups: no Unix group named "
                          f"{', '.join(map(repr, unknown))} on this machine")
    return limits


def limits_for(limits: LimitSettings, user: str,
               groups_of: Callable[[str], tuple[str, ...]] | None = None) -> UserLimits:
    """`user`'s effective limits: a listed group's value replaces the lab-wide one; of several
    listed groups the highest value wins (unset in every group: the lab-wide value)."""
    from fleet.unix_groups import group_lookup

    mine = [name for name in (groups_of or group_lookup())(user) if name in limits.groups]
    values: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for spec in fields(GroupLimits):
        name = spec.name
        chosen: tuple[float, str] | None = None
        for group in mine:
            value = getattr(limits.groups[group], name)
            if value is not None and (chosen is None or value > chosen[0]):
                chosen = (value, f"limits.groups.{group}.{name}")
        if chosen is not None:
            values[name], sources[name] = chosen
        else:
            values[name], sources[name] = getattr(limits, name), f"limits.{name}"
    return UserLimits(user, values, sources)


def over_gpu_limit(limits: UserLimits, held: int, wanted: int) -> str | None:
    """Why holding `wanted` more GPUs on top of `held` is over the limit (None: it is not)."""
    cap = limits.max_gpus
    if cap is None or held + wanted <= cap:
        return None
    return (f"{limits.named('max_gpus_per_user')}: {limits.user} holds {held} GPU(s) and "
            f"asks for {wanted} more")


def check_reservation(limits: UserLimits, duration_s: float | None) -> None:
    """LimitReached when a reservation of `duration_s` (None: until released) is too long."""
    longest = limits.value("max_reservation")
    if longest is None:
        return
    if duration_s is None:
        raise LimitReached(f"{limits.named('max_reservation')}: give --for (at most "
                           f"{longest:g}s) for a reservation")
    if duration_s > longest:
        raise LimitReached(f"{limits.named('max_reservation')}: a reservation of "
                           f"{duration_s:g}s is longer")


def check_queued(limits: UserLimits, queued: int) -> None:
    """LimitReached when the user already has as many queued tasks as they may."""
    most = limits.value("max_queued_per_user")
    if most is not None and queued >= most:
        raise LimitReached(f"{limits.named('max_queued_per_user')}: {limits.user} has "
                           f"{queued} task(s) waiting already")

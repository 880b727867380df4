"""Pick hosts from an Inventory by name globs, groups and labels (`gpu*,@lab,label:rack=a`)."""

from __future__ import annotations

from fnmatch import fnmatchcase

from fleet.errors import ConfigError
from fleet.inventory.inventory import Inventory
from fleet.inventory.yamlnodes import closest
from fleet.model import HostSpec

LABEL_PREFIX = "label:"


def select_hosts(inv: Inventory, pattern: str | None) -> tuple[HostSpec, ...]:
    """The hosts matching `pattern`, in inventory order; all hosts for None or "".

    `pattern` is comma-separated terms, each one of:
      NAME-GLOB        fnmatch on host names (`gpu0*`), or exactly a group's name (`lab`)
      @GROUP-GLOB      every host in the matching groups (`@all` is every host)
      label:KEY=GLOB   hosts whose label KEY matches (`label:KEY` alone: hosts having KEY)
      !TERM            leaves out what TERM matches (only exclusions: from all hosts)
    A term that matches no host is a ConfigError (a typo must not silently select nothing).
    """
    if pattern is None or not pattern.strip():
        return inv.hosts
    included: set[str] = set()
    excluded: set[str] = set()
    has_inclusion = False
    for raw_term in pattern.split(","):
        term = raw_term.strip()
        if not term:
            continue
        negated = term.startswith("!")
        body = term[1:].strip() if negated else term
        matched = _matching_names(inv, body)
        if not matched:
            raise _no_match_error(inv, term, body)
        if negated:
            excluded |= matched
        else:
            has_inclusion = True
            included |= matched
    if not has_inclusion:
        included = {spec.name for spec in inv.hosts}
    return tuple(spec for spec in inv.hosts if spec.name in included - excluded)


def _matching_names(inv: Inventory, term: str) -> set[str]:
    """Names of the hosts one term (without `!`) matches."""
    if term in ("all", "@all"):
        return {spec.name for spec in inv.hosts}
    if term.startswith("@"):
        group_glob = term[1:]
        return {
            name
            for group, members in inv.groups.items()
            if fnmatchcase(group, group_glob)
            for name in members
        }
    if term.startswith(LABEL_PREFIX):
        key, sep, value_glob = term[len(LABEL_PREFIX) :].partition("=")
        return {
            spec.name
            for spec in inv.hosts
            if (value := spec.label(key.strip())) is not None
            and (not sep or fnmatchcase(value, value_glob.strip()))
        }
    names = {spec.name for spec in inv.hosts if fnmatchcase(spec.name, term)}
    return names | set(inv.groups.get(term, ()))


def _no_match_error(inv: Inventory, term: str, body: str) -> ConfigError:
    """The error for a term matching nothing, suggesting a close host or group name."""
    where = f"inventory {inv.path}" if inv.path is not None else "the inventory"
    if body.startswith(LABEL_PREFIX):
        labels = sorted(
            {f"{LABEL_PREFIX}{key}={value}" for spec in inv.hosts for key, value in spec.labels}
        )
        hint = closest(body, labels)
    elif body.startswith("@"):
        hint = closest(body, [f"@{group}" for group in inv.groups])
    else:
        hint = closest(body, [spec.name for spec in inv.hosts] + list(inv.groups))
    return ConfigError(f"host pattern {term!r} matches no host in {where}{hint}")

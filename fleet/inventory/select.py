"""Pick hosts from an Inventory by name globs, groups and labels (`gpu*,@lab,label:rack=a`)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache

from fleet.errors import ConfigError
from fleet.inventory.inventory import Inventory
from fleet.inventory.ranges import expand_glob_ranges
from fleet.inventory.yamlnodes import closest
from fleet.model import HostSpec

LABEL_PREFIX = "label:"


def select_hosts(inv: Inventory, pattern: str | None) -> tuple[HostSpec, ...]:
    """The hosts matching `pattern`, in inventory order; all hosts for None or "".

    `pattern` is comma-separated terms, each one of:
      NAME-GLOB        fnmatch on host names (`gpu0*`), or exactly a group's name (`lab`)
      @GROUP-GLOB      every host in the matching groups (`@all` is every host)
    In NAME-GLOB and GROUP-GLOB, `[START:END(:STEP)]` is the inventory's range (`gpu[1:3]` is
    gpu1, gpu2 and gpu3; a bad range is a ConfigError); a bracket without a colon stays an
    fnmatch character class (`gpu0[12]`).
      label:KEY=GLOB   hosts whose label KEY matches (`label:KEY` alone: hosts having KEY)
      !TERM            leaves out what TERM matches (only exclusions: from all hosts)
    A term that matches no host is a ConfigError (a typo must not silently select nothing),
    and so is a pattern whose exclusions leave no host at all.
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
        if not body.startswith(LABEL_PREFIX):
            try:
                expand_glob_ranges(body.removeprefix("@"))
            except ConfigError as exc:
                raise ConfigError(f"host pattern {term!r}: {exc}") from exc
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
    selected = tuple(spec for spec in inv.hosts if spec.name in included - excluded)
    if not selected and included:
        where = f"inventory {inv.path}" if inv.path is not None else "the inventory"
        raise ConfigError(f"host pattern {pattern!r} leaves no host in {where}: its "
                          "exclusions (!) remove every host it selects")
    return selected


def host_matches(pattern: str | None, name: str, groups: tuple[str, ...],
                 labels: tuple[tuple[str, str], ...]) -> bool:
    """Whether one host (its name, groups and labels) matches `pattern`; True for None or "".

    The same terms as select_hosts, for one host at a time (placement, the TUI's filter): a
    term that matches nothing is simply no match here, not an error.
    """
    if pattern is None or not pattern.strip():
        return True
    included = False
    has_inclusion = False
    for raw_term in pattern.split(","):
        term = raw_term.strip()
        if not term:
            continue
        negated = term.startswith("!")
        body = term[1:].strip() if negated else term
        hit = term_matches(body, name, groups, labels)
        if negated and hit:
            return False
        if not negated:
            has_inclusion = True
            included = included or hit
    return included or not has_inclusion


def term_matches(term: str, name: str, groups: tuple[str, ...],
                 labels: tuple[tuple[str, str], ...]) -> bool:
    """Whether one term (without `!`) matches one host: the single definition of each term."""
    if term in ("all", "@all"):
        return True
    if term.startswith("@"):
        return any(_glob_matches(group, term[1:]) for group in groups)
    if term.startswith(LABEL_PREFIX):
        key, sep, value_glob = term[len(LABEL_PREFIX) :].partition("=")
        values = [value for label_key, value in labels if label_key == key.strip()]
        return bool(values) and (not sep or any(fnmatchcase(v, value_glob.strip())
                                                 for v in values))
    return _glob_matches(name, term) or term in groups


def _glob_matches(name: str, glob: str) -> bool:
    """fnmatch, with the inventory's `[START:END]` ranges in `glob` expanded."""
    return any(fnmatchcase(name, each) for each in _globs(glob))


@lru_cache(maxsize=256)
def _globs(glob: str) -> tuple[str, ...]:
    """`glob` with its ranges expanded; none (matching nothing) for a bad range."""
    try:
        return tuple(expand_glob_ranges(glob))
    except ConfigError:
        return ()


def _matching_names(inv: Inventory, term: str) -> set[str]:
    """Names of the hosts one term (without `!`) matches."""
    names = {spec.name for spec in inv.hosts
             if term_matches(term, spec.name, spec.groups, spec.labels)}
    if not term.startswith(("@", LABEL_PREFIX)):
        names |= set(inv.groups.get(term, ()))  # a group's exact name, even one hidden in specs
        names |= set(inv.implicit_groups.get(term, ()))
    elif term.startswith("@"):
        for group, members in inv.implicit_groups.items():
            if _glob_matches(group, term[1:]):
                names |= set(members)
    return names


def _no_match_error(inv: Inventory, term: str, body: str) -> ConfigError:
    """The error for a term matching nothing, suggesting a close host or group name."""
    where = f"inventory {inv.path}" if inv.path is not None else "the inventory"
    if body.startswith(LABEL_PREFIX):
        labels = sorted(
            {f"{LABEL_PREFIX}{key}={value}" for spec in inv.hosts for key, value in spec.labels}
        )
        hint = closest(body, labels)
    elif body.startswith("@"):
        hint = closest(body, [f"@{group}" for group in (*inv.groups, *inv.implicit_groups)])
    else:
        hint = closest(body, [spec.name for spec in inv.hosts] + [*inv.groups,
                                                                   *inv.implicit_groups])
    return ConfigError(f"host pattern {term!r} matches no host in {where}{hint}")

"""How many rows `fleet history gpus|hosts` reads: a default bound, and the word when cut.

Every row is built in memory before it is printed (and, through `fleet serve`, on the shared
server first), so a range is never read whole by default: raw samples stop at RAW_LIMIT and
buckets at BUCKETED_LIMIT unless --limit says otherwise. One row more than shown is asked for,
to learn whether the range holds more; when it does, the output is cut and stderr says how to
see the rest.
"""

from __future__ import annotations

from typing import TypeVar

import click

from fleet.probe.limits import MAX_INT

T = TypeVar("T")

RAW_LIMIT = 10_000
# The most points one reply of `fleet serve` holds (fleet.wire.history.MAX_HISTORY_POINTS,
# not imported: local reads load no wire code).
BUCKETED_LIMIT = 100_000

LIMIT_HELP = (f"At most N rows, the earliest [default: {RAW_LIMIT} samples, "
              f"{BUCKETED_LIMIT} buckets with --bucket].")


def shown_limit(limit: int | None, bucket_s: int | None) -> int:
    """The rows to show: --limit, or the default for raw samples or buckets."""
    if limit is not None:
        return limit
    return RAW_LIMIT if bucket_s is None else BUCKETED_LIMIT


def probe_limit(shown: int) -> int:
    """The rows to read: one more than shown, which tells whether the range holds more."""
    return min(shown, MAX_INT - 1) + 1


def cut(points: list[T], shown: int, bucket_s: int | None) -> tuple[list[T], bool]:
    """The first `shown` points, and whether there were more; when there were, says on stderr
    that the output was cut and how to see the rest."""
    if len(points) <= shown:
        return points, False
    if bucket_s is None:
        how = ("--limit N shows more, --bucket (e.g. 1m) aggregates them, --since/--until "
               "narrow the range")
        what = "samples"
    else:
        how = "--limit N shows more, a wider --bucket or a narrower --since/--until fewer"
        what = "buckets"
    click.echo(f"fleet: showing the first {shown} {what}; the range holds more: {how}",
               err=True)
    return points[:shown], True

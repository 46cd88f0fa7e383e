"""The derived-work marks this process wrote, so that a chunk does not write them again while
they stand.

A GPU-hour gets a window a minute, each in a later chunk; while the derived pass lags behind
the window path (a backlog, a catch-up) every chunk would upsert the same marks again — about
as many index look-ups and row locks as the windows it copies. A chunk skips a mark that this
process wrote (and saw committed) under the same pass number, reaching back at least as far.
That is safe because a pass takes a new number before it claims, under ``MARKS_LOCK`` held
exclusively, while each chunk that skips holds it shared from reading the number to its
commit (``telemetry.services.derived``): a mark remembered under the current number is still
in the table, and whichever pass claims it claims after this chunk's windows are committed.

Only used outside a caller's transaction (whose commit is not the chunk's).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, ClassVar

Mark = tuple[uuid.UUID, dt.datetime, dt.datetime]  # GPU, UTC hour, earliest instant touched
LIMIT = 1_000_000  # marks remembered at most (~150 MB); forgotten all at once beyond


class _Written:
    database: ClassVar[tuple[Any, ...] | None] = None
    number: ClassVar[int | None] = None  # the pass number they were written under
    lo: ClassVar[dict[tuple[int, dt.datetime], dt.datetime]] = {}


def marks_unwritten(database: tuple[Any, ...], number: int, marks: list[Mark]) -> list[Mark]:
    """The marks a chunk that read pass ``number`` must write: those this process has not
    written under that number, or only from a later instant."""
    if (database, number) != (_Written.database, _Written.number):
        _Written.database, _Written.number, _Written.lo = database, number, {}
        return marks
    lo = _Written.lo
    unwritten = []
    for mark in marks:
        known = lo.get((mark[0].int, mark[1]))
        if known is None or mark[2] < known:
            unwritten.append(mark)
    return unwritten


def marks_written(database: tuple[Any, ...], number: int, marks: list[Mark]) -> None:
    """Remembers a committed chunk's marks (nothing if a newer number was read since)."""
    if (database, number) != (_Written.database, _Written.number):
        return
    lo = _Written.lo
    if len(lo) + len(marks) > LIMIT:
        lo.clear()
    for gpu, hour, since in marks:
        key = (gpu.int, hour)
        known = lo.get(key)
        if known is None or since < known:
            lo[key] = since


def marks_forget() -> None:
    """Forgets every mark remembered (a chunk failed: what it wrote is not known)."""
    _Written.database, _Written.number, _Written.lo = None, None, {}

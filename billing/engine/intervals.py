"""Half-open ``[start, end)`` intervals of aware UTC datetimes, and the time-state partition.

Rule 1 of the accounting contract: every second of a GPU's in-service time is in exactly one
state, by precedence ``maintenance`` → ``down`` → ``up`` → ``no_data``; seconds outside
in-service are not counted at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple


class Interval(NamedTuple):
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        """Whole seconds; accounting inputs are aligned to the second."""
        return int((self.end - self.start) // timedelta(seconds=1))


def _check(interval: Interval) -> None:
    if interval.start.tzinfo is None or interval.end.tzinfo is None:
        raise ValueError(f"naive datetime in {interval}; accounting uses aware UTC datetimes")


def normalize(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-empty, non-overlapping, with touching intervals merged."""
    ordered = sorted(i for i in intervals if i.end > i.start)
    merged: list[Interval] = []
    for interval in ordered:
        _check(interval)
        if merged and interval.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, interval.end))
        else:
            merged.append(interval)
    return merged


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Where both sets cover time."""
    if type(a) is list and type(b) is list and len(a) == 1 and len(b) == 1:
        # One interval each (a GPU's slice and its period: most calls of a close), as the
        # sweep below would: empty ones dropped, aware datetimes checked.
        x, y = a[0], b[0]
        if x.end <= x.start or y.end <= y.start:
            return []
        _check(x)
        _check(y)
        start = max(x.start, y.start)
        end = min(x.end, y.end)
        return [Interval(start, end)] if start < end else []
    left, right = normalize(a), normalize(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i].start, right[j].start)
        end = min(left[i].end, right[j].end)
        if start < end:
            out.append(Interval(start, end))
        if left[i].end < right[j].end:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Where ``a`` covers time and ``b`` does not."""
    out: list[Interval] = []
    holes = normalize(b)
    for interval in normalize(a):
        cursor = interval.start
        for hole in holes:
            if hole.end <= cursor or hole.start >= interval.end:
                continue
            if hole.start > cursor:
                out.append(Interval(cursor, hole.start))
            cursor = max(cursor, hole.end)
            if cursor >= interval.end:
                break
        if cursor < interval.end:
            out.append(Interval(cursor, interval.end))
    return out


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    return intersect(intervals, [window])


def total_seconds(intervals: Iterable[Interval]) -> int:
    return sum(i.seconds for i in normalize(intervals))


class TimeState(StrEnum):
    MAINTENANCE = "maintenance"
    DOWN = "down"
    UP = "up"
    NO_DATA = "no_data"


@dataclass(frozen=True)
class StatePartition:
    """In-service time split into the four states; the parts never overlap."""

    in_service: list[Interval]
    maintenance: list[Interval]
    down: list[Interval]
    up: list[Interval]
    no_data: list[Interval]

    def seconds(self, state: TimeState) -> int:
        return total_seconds(getattr(self, state.value))

    @property
    def in_service_seconds(self) -> int:
        return total_seconds(self.in_service)

    @property
    def availability_denominator_seconds(self) -> int:
        """Rule 2: in-service minus maintenance (no_data counts against availability)."""
        return self.in_service_seconds - self.seconds(TimeState.MAINTENANCE)


def partition_states(
    *,
    in_service: Sequence[Interval],
    maintenance: Sequence[Interval],
    down: Sequence[Interval],
    up: Sequence[Interval],
) -> StatePartition:
    """Assigns each in-service second to the first state that claims it, by precedence.

    ``down`` is telemetry saying down, or an incident; ``up`` is telemetry saying up or
    degraded. What nothing claims is ``no_data``.
    """
    service = normalize(in_service)
    maintenance_part = intersect(service, maintenance)
    rest = subtract(service, maintenance_part)
    down_part = intersect(rest, down)
    rest = subtract(rest, down_part)
    up_part = intersect(rest, up)
    no_data_part = subtract(rest, up_part)
    return StatePartition(service, maintenance_part, down_part, up_part, no_data_part)

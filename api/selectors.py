"""Reads the API needs beyond filtering: availability and utilization series."""

from __future__ import annotations

import bisect
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from django.db import connection

from billing.engine.intervals import Interval
from billing.engine.money import half_even_div
from billing.engine.usage import Measure, hour_of
from billing.selectors.availability import (
    as_decimal,
    held_availability,
    measure_sum,
    shown_busy_gpu_hours,
    shown_energy_kwh,
)
from billing.selectors.facts import GpuFacts, gpu_facts
from billing.selectors.usage import cells_load
from fleet.models import Gpu

Step = Literal["hour", "day", "month"]
HOUR = timedelta(hours=1)
STEPS: dict[str, timedelta] = {"hour": HOUR, "day": timedelta(days=1)}  # fixed widths


@dataclass(frozen=True)
class SeriesPoint:
    """One bucket. ``held_s`` is the part the caller's accounts held the GPU; every figure
    counts only those seconds (the GPU's own figures, not weighted by share). All None-able
    ratios are None when their denominator is zero."""

    start: datetime
    end: datetime
    held_s: int
    in_service_s: int
    up_s: int
    down_s: int
    maintenance_s: int
    no_data_s: int
    availability: Decimal | None
    utilization: Decimal | None
    busy_gpu_hours: Decimal
    energy_kwh: Decimal


def _held(fact: GpuFacts, owner_ids: Sequence[uuid.UUID]) -> list[Interval]:
    """When any of ``owner_ids`` held a share of the GPU within the facts' range, merged:
    the facts' ownership slices that list one of them (a slice is cut wherever any share
    changes, so their union is exactly those owners' holdings)."""
    keys = {str(owner) for owner in owner_ids}
    merged: list[Interval] = []
    for piece in fact.ownership:
        if keys.isdisjoint(piece.shares):
            continue
        a, b = piece.interval
        if merged and a <= merged[-1].end:
            merged[-1] = Interval(merged[-1].start, max(merged[-1].end, b))
        else:
            merged.append(Interval(a, b))
    return merged


# Whole-hour rollups summed per bucket: a bucket with nothing inside it that the accounting
# cuts at (see ``_plain``) is one cell of whole hours, whose figures are these sums. Keyed by
# the bucket's start in epoch seconds; busy time in thousandths of a percent-second and energy
# in nano-kWh (the columns' scales), so every sum is an exact integer.
_BUCKET_ROLLUPS = """
SELECT extract(epoch FROM date_bin(%(width)s, h.hour, %(origin)s))::bigint AS bucket,
       sum(h.seconds_up + h.seconds_degraded), sum(h.seconds_down),
       (sum(h.util_gpu_seconds) * 1000)::bigint,
       (sum(h.energy_kwh) * 1000000000)::numeric(38, 0)
  FROM telemetry_hourlyrollup h
 WHERE h.gpu_id = %(gpu)s AND h.hour >= %(start)s AND h.hour < %(end)s
 GROUP BY 1
"""
_ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)  # the API's buckets are aligned to it (views)


def _plain_gap(fact: GpuFacts, held: Sequence[Interval], at: datetime) -> bool:
    """Whether whole hours from ``at`` up to the next cut (``series_parts``) are one cell
    counted from telemetry that the caller's accounts held: held, in service, outside
    maintenance and incidents at ``at``. Nothing the accounting cuts at (a boundary of
    holding, service, maintenance, incidents, ownership or rentals) lies before the next
    cut, so the answer holds throughout."""
    return (
        _covers(held, at)
        and _covers(fact.in_service, at)
        and not _covers(fact.maintenance, at)
        and not _covers(fact.incidents, at)
        and not _covers(fact.operator_incidents, at)
    )


def _covers(intervals: Sequence[Interval], at: datetime) -> bool:
    return any(i.start <= at < i.end for i in intervals)


class PlainBucket(NamedTuple):
    """A plain bucket (``_plain_gap``): the rollups' exact integer sums over it. ``busy_milli`` is
    busy time in thousandths of a percent-second (``util_gpu_seconds`` x 1000), ``energy_nano``
    energy in nano-kWh."""

    start: datetime
    end: datetime
    up_s: int
    down_s: int
    busy_milli: int
    energy_nano: int


def _plain_sums(
    *, gpu: Gpu, start: datetime, end: datetime, width: timedelta
) -> dict[int, tuple[int, int, int, int]]:
    """Per bucket start (epoch seconds), the rollups' (up, down, busy, energy) sums as
    integers (``_BUCKET_ROLLUPS``): one grouped read."""
    params: dict[str, Any] = {
        "width": width,
        "origin": _ORIGIN,
        "gpu": gpu.pk,
        "start": start,
        "end": end,
    }
    with connection.cursor() as cursor:
        cursor.execute(_BUCKET_ROLLUPS, params)
        return {
            bucket: (up, down, busy, int(energy))
            for bucket, up, down, busy, energy in cursor.fetchall()
        }


SIX = Decimal("0.000001")
_NO_SUMS = (0, 0, 0, 0)


def _half_even6(numerator: int, denominator: int) -> Decimal:
    """numerator ÷ denominator rounded half-even to 6 places: what
    ``as_decimal(Fraction(numerator, denominator))`` gives, in integers."""
    return Decimal(half_even_div(numerator * 1_000_000, denominator)).scaleb(-6)


def plain_point(bucket: PlainBucket) -> SeriesPoint:
    """The point of a plain bucket (one cell of whole hours, in service, no maintenance or
    incident): ``CellUsage.measure``'s figures for it, from the rollups' sums, rounded as
    ``as_decimal`` rounds them (tests/api/test_series_fast_path.py compares the two)."""
    up, seconds = bucket.up_s, int((bucket.end - bucket.start).total_seconds())
    # busy seconds = busy_milli / 100,000 (a percent-second is 1/100 of a busy second)
    return SeriesPoint(
        start=bucket.start,
        end=bucket.end,
        held_s=seconds,
        in_service_s=seconds,
        up_s=up,
        down_s=bucket.down_s,
        maintenance_s=0,
        no_data_s=seconds - bucket.down_s - up,
        availability=_half_even6(up, seconds),
        utilization=_half_even6(bucket.busy_milli, 100_000 * up) if up else None,
        busy_gpu_hours=_half_even6(bucket.busy_milli, 360_000_000),
        energy_kwh=_half_even6(bucket.energy_nano, 1_000_000_000),
    )


def series_parts(
    *,
    gpu: Gpu,
    owner_ids: Sequence[uuid.UUID],
    start: datetime,
    end: datetime,
    step: Step,
    fast: bool = True,
) -> list[PlainBucket | SeriesPoint]:
    """Per hour or day of ``[start, end)`` (aligned to the step, UTC), the accounting figures
    (rules 1–3) over the seconds the caller's accounts held the GPU: a plain bucket as the
    rollups' sums (``PlainBucket``; the API renders those straight to text, ``plain_point``
    makes one a point) and any other as its point.

    A bucket that is one cell of whole hours counted from telemetry (``_plain_gap``: the
    usual case) is summed from the rollups in one grouped query; the others, if any, from one load
    of the cells (``cells_load``, the engine's exact path) over the span they cover, cut at
    every bucket and holding. ``fast=False`` loads cells for every bucket: the reference the
    fast path is tested against (tests/api/test_series_fast_path.py)."""
    width = STEPS[step]
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    (fact,) = gpu_facts(gpu_ids=[gpu.pk], start=start, end=end, placed_only=True)
    held = _held(fact, owner_ids)
    cuts = sorted(fact.boundaries() | {t for h in held for t in (h.start, h.end)})
    whole_hours = fast and start == hour_of(start) and width % HOUR == timedelta(0)
    if (
        whole_hours
        and (end - start) % width == timedelta(0)
        and not any(start < t < end for t in cuts)
        and _plain_gap(fact, held, start)
    ):
        # The usual case: the whole range is one plain gap, every bucket summed as it is.
        sums = _plain_sums(gpu=gpu, start=start, end=end, width=width)
        first, width_s = int(start.timestamp()), int(width.total_seconds())
        count = (end - start) // width
        return [
            PlainBucket(start + i * width, start + (i + 1) * width, *sums.get(key, _NO_SUMS))
            for i, key in enumerate(range(first, first + count * width_s, width_s))
        ]
    gaps: dict[int, bool] = {}  # per gap between cuts: whether its buckets are plain
    # Each bucket with the pieces of it the caller's accounts held, whether it is plain, and
    # its start in epoch seconds (the key of its sums).
    buckets: list[tuple[Interval, list[Interval], bool, int]] = []
    at, at_s, width_s = start, int(start.timestamp()), int(width.total_seconds())
    while at < end:
        b = Interval(at, min(at + width, end))
        gap = bisect.bisect_right(cuts, at)
        if gap < len(cuts) and cuts[gap] < b.end:  # cut inside: held in pieces, not plain
            pieces = [
                Interval(max(h.start, at), min(h.end, b.end))
                for h in held
                if h.start < b.end and h.end > at
            ]
            buckets.append((b, pieces, False, at_s))
        else:  # within one gap: held throughout or not at all
            plain = gaps.get(gap)
            if plain is None:
                plain = gaps[gap] = whole_hours and _plain_gap(fact, held, at)
            held_here = plain or _covers(held, at)
            buckets.append((b, [b] if held_here else [], plain, at_s))
        at, at_s = b.end, at_s + width_s
    sums = (
        _plain_sums(gpu=gpu, start=start, end=end, width=width)
        if any(plain for _, _, plain, _ in buckets)
        else {}
    )
    rest = [b for b, pieces, plain, _ in buckets if pieces and not plain]
    usage = None
    if rest:
        # Only the span the other buckets cover: the loader cuts cells inside the range, at
        # every bucket and holding.
        extra = {b.start for b, _, _, _ in buckets} | {t for h in held for t in (h.start, h.end)}
        extra = {t for t in extra if start < t < end}
        span = Interval(rest[0].start, rest[-1].end)
        narrowed = dataclasses.replace(fact, range=span)
        usage = cells_load(facts=[narrowed], extra_cuts={gpu.pk: extra}).get(gpu.pk)
    parts: list[PlainBucket | SeriesPoint] = []
    for bucket, pieces, plain, key in buckets:
        if plain:  # held throughout (no holding boundary inside): held_s is the bucket's
            parts.append(PlainBucket(bucket.start, bucket.end, *sums.get(key, _NO_SUMS)))
            continue
        held_s = sum(p.seconds for p in pieces)
        m = measure_sum([usage.measure(p) for p in pieces] if usage is not None else [])
        parts.append(
            _point(
                bucket,
                held_s,
                m,
                busy_gpu_hours=(m.busy_s / 3600).quantize(SIX),
                energy_kwh=m.energy_kwh.quantize(SIX),
            )
        )
    return parts


def _point(
    bucket: Interval, held_s: int, m: Measure, *, busy_gpu_hours: Decimal, energy_kwh: Decimal
) -> SeriesPoint:
    """A series point from a measure of the bucket; busy hours and energy as the caller
    rounds them (per bucket, or per statement line)."""
    return SeriesPoint(
        start=bucket.start,
        end=bucket.end,
        held_s=held_s,
        in_service_s=m.in_service_s,
        up_s=m.up_s,
        down_s=m.down_s,
        maintenance_s=m.maintenance_s,
        no_data_s=m.no_data_s,
        availability=as_decimal(m.availability),
        utilization=as_decimal(m.utilization),
        busy_gpu_hours=busy_gpu_hours,
        energy_kwh=energy_kwh,
    )


def month_starts(*, start: datetime, end: datetime) -> list[datetime] | None:
    """The first instants of the calendar months (UTC) from ``start`` up to ``end``, or None
    when either is not the first second of a month."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if start != _month_floor(start) or end != _month_floor(end):
        return None
    out: list[datetime] = []
    at = start
    while at < end:
        out.append(at)
        at = _month_floor(at + timedelta(days=32))
    return out


def _month_floor(at: datetime) -> datetime:
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_points(
    *, gpu: Gpu, owner_ids: Sequence[uuid.UUID], starts: Sequence[datetime], end: datetime
) -> list[SeriesPoint]:
    """Per calendar month, the figures over the seconds the caller's accounts held the GPU,
    measured run by run by billing's own selector (``held_availability``): a closed month's
    point equals the sum of the GPU's lines on the caller's statement for it (one owner)."""
    held = held_availability(
        gpu_ids=[gpu.pk], owner_ids=owner_ids, start=starts[0], end=end, cuts=starts
    )[gpu.pk]
    points = []
    for a, b in zip(starts, [*starts[1:], end], strict=True):
        pieces = held.pieces(Interval(a, b))
        m = measure_sum(pieces)
        held_s = held.held_seconds(Interval(a, b))
        points.append(
            _point(
                Interval(a, b),
                held_s,
                m,
                # As the lines show them, added up: each run's figure rounded first.
                busy_gpu_hours=shown_busy_gpu_hours(pieces),
                energy_kwh=shown_energy_kwh(pieces),
            )
        )
    return points

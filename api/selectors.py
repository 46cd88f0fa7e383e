"""Reads the API needs beyond filtering: availability and utilization series."""

from __future__ import annotations

import bisect
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from django.db import connection
from django.db.models import Q

from billing.engine.intervals import Interval
from billing.engine.usage import Measure, hour_of
from billing.selectors.availability import as_decimal
from billing.selectors.facts import GpuFacts, gpu_facts
from billing.selectors.usage import cells_load
from fleet.models import Gpu, Ownership

Step = Literal["hour", "day"]
HOUR = timedelta(hours=1)
STEPS: dict[str, timedelta] = {"hour": HOUR, "day": timedelta(days=1)}


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


def _sum(measures: Sequence[Measure]) -> Measure:
    return Measure(
        in_service_s=sum(m.in_service_s for m in measures),
        maintenance_s=sum(m.maintenance_s for m in measures),
        down_s=sum(m.down_s for m in measures),
        up_s=sum(m.up_s for m in measures),
        no_data_s=sum(m.no_data_s for m in measures),
        busy_s=sum((m.busy_s for m in measures), Decimal(0)),
        energy_kwh=sum((m.energy_kwh for m in measures), Decimal(0)),
        operator_incident_s=sum(m.operator_incident_s for m in measures),
    )


def _held(*, gpu: Gpu, owner_ids: Sequence[uuid.UUID], window: Interval) -> list[Interval]:
    """When any of ``owner_ids`` held a share of the GPU within ``window``, merged."""
    rows = (
        Ownership.objects.filter(gpu=gpu, owner_id__in=owner_ids, valid_from__lt=window.end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=window.start))
        .order_by("valid_from")
        .values_list("valid_from", "valid_to")
    )
    merged: list[Interval] = []
    for start, end in rows:
        a, b = max(start, window.start), min(end or window.end, window.end)
        if merged and a <= merged[-1].end:
            merged[-1] = Interval(merged[-1].start, max(merged[-1].end, b))
        else:
            merged.append(Interval(a, b))
    return merged


# Whole-hour rollups summed per bucket: a bucket with nothing inside it that the accounting
# cuts at (see ``_plain``) is one cell of whole hours, whose figures are these sums.
_BUCKET_ROLLUPS = """
SELECT date_bin(%(width)s, h.hour, %(origin)s) AS bucket,
       sum(h.seconds_up + h.seconds_degraded), sum(h.seconds_down),
       sum(h.util_gpu_seconds), sum(h.energy_kwh)
  FROM telemetry_hourlyrollup h
 WHERE h.gpu_id = %(gpu)s AND h.hour >= %(start)s AND h.hour < %(end)s
 GROUP BY 1
"""
_ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)  # the API's buckets are aligned to it (views)


def _plain(
    fact: GpuFacts, cuts: Sequence[datetime], b: Interval, segments: dict[int, bool]
) -> bool:
    """Whether a bucket of whole hours that the caller's accounts held (some of) is one cell
    counted from telemetry: nothing the accounting cuts at inside it (no boundary of holding,
    service, maintenance, incidents, ownership or rentals: so it is held throughout), and in
    service, outside maintenance and incidents at its start (so throughout).

    ``cuts`` holds every end of those intervals, so between two cuts the answer at the start
    does not change: ``segments`` keeps it per gap between cuts."""
    inside = bisect.bisect_right(cuts, b.start)
    if inside < len(cuts) and cuts[inside] < b.end:
        return False
    known = segments.get(inside)
    if known is None:
        known = segments[inside] = (
            _covers(fact.in_service, b.start)
            and not _covers(fact.maintenance, b.start)
            and not _covers(fact.incidents, b.start)
            and not _covers(fact.operator_incidents, b.start)
        )
    return known


def _covers(intervals: Sequence[Interval], at: datetime) -> bool:
    return any(i.start <= at < i.end for i in intervals)


def _plain_sums(
    *, gpu: Gpu, start: datetime, end: datetime, width: timedelta
) -> dict[datetime, tuple[Any, ...]]:
    """Per bucket start, the rollups' (up, down, busy, energy) sums: one grouped read."""
    params: dict[str, Any] = {
        "width": width,
        "origin": _ORIGIN,
        "gpu": gpu.pk,
        "start": start,
        "end": end,
    }
    with connection.cursor() as cursor:
        cursor.execute(_BUCKET_ROLLUPS, params)
        return {row[0]: row[1:] for row in cursor.fetchall()}


SIX = Decimal("0.000001")
_NO_SUMS = (0, 0, Decimal(0), Decimal(0))


def _half_even6(numerator: int, denominator: int) -> Decimal:
    """numerator ÷ denominator (both ≥ 0) rounded half-even to 6 places: what
    ``as_decimal(Fraction(numerator, denominator))`` gives, in integers."""
    q, r = divmod(numerator * 1_000_000, denominator)
    if 2 * r > denominator or (2 * r == denominator and q & 1):
        q += 1
    return Decimal(q).scaleb(-6)


def _plain_point(bucket: Interval, sums: tuple[Any, ...]) -> SeriesPoint:
    """The point of a plain bucket (one cell of whole hours, in service, no maintenance or
    incident): ``CellUsage.measure``'s figures for it, from the rollups' sums, rounded as
    ``as_decimal`` rounds them (tests/api/test_series_fast_path.py compares the two)."""
    up_sum, down_sum, busy, energy = sums
    up, down, seconds = int(up_sum), int(down_sum), bucket.seconds
    busy_s = (busy + Decimal(0)) / 100
    if up:
        n, d = busy_s.as_integer_ratio()
        utilization: Decimal | None = _half_even6(n, d * up)
    else:
        utilization = None
    return SeriesPoint(
        start=bucket.start,
        end=bucket.end,
        held_s=seconds,
        in_service_s=seconds,
        up_s=up,
        down_s=down,
        maintenance_s=0,
        no_data_s=seconds - down - up,
        availability=_half_even6(up, seconds) if seconds else None,
        utilization=utilization,
        busy_gpu_hours=(busy_s / 3600).quantize(SIX),
        energy_kwh=(energy + Decimal(0)).quantize(SIX),
    )


def gpu_series(
    *,
    gpu: Gpu,
    owner_ids: Sequence[uuid.UUID],
    start: datetime,
    end: datetime,
    step: Step,
    fast: bool = True,
) -> list[SeriesPoint]:
    """Per hour or day of ``[start, end)`` (aligned to the step, UTC), the accounting figures
    (rules 1–3) over the seconds the caller's accounts held the GPU.

    A bucket that is one cell of whole hours counted from telemetry (``_plain``: the usual
    case) is summed from the rollups in one grouped query; the others, if any, from one load
    of the cells (``cells_load``, the engine's exact path) over the span they cover, cut at
    every bucket and holding. ``fast=False`` loads cells for every bucket: the reference the
    fast path is tested against (tests/api/test_series_fast_path.py)."""
    width = STEPS[step]
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    window = Interval(start, end)
    held = _held(gpu=gpu, owner_ids=owner_ids, window=window)
    (fact,) = gpu_facts(gpu_ids=[gpu.pk], start=start, end=end)
    boundaries = sorted(fact.boundaries() | {t for h in held for t in (h.start, h.end)})
    whole_hours = fast and start == hour_of(start) and width % HOUR == timedelta(0)
    segments: dict[int, bool] = {}
    # Each bucket with the pieces of it the caller's accounts held, and whether it is plain.
    buckets: list[tuple[Interval, list[Interval], bool]] = []
    at = start
    while at < end:
        b = Interval(at, min(at + width, end))
        pieces = [
            Interval(max(h.start, at), min(h.end, b.end))
            for h in held
            if h.start < b.end and h.end > at
        ]
        plain = bool(pieces) and whole_hours and _plain(fact, boundaries, b, segments)
        buckets.append((b, pieces, plain))
        at = b.end
    sums = (
        _plain_sums(gpu=gpu, start=start, end=end, width=width)
        if any(plain for _, _, plain in buckets)
        else {}
    )
    rest = [b for b, pieces, plain in buckets if pieces and not plain]
    usage = None
    if rest:
        # Only the span the other buckets cover: the loader cuts cells inside the range, at
        # every bucket and holding.
        cuts = {b.start for b, _, _ in buckets} | {t for h in held for t in (h.start, h.end)}
        cuts = {t for t in cuts if start < t < end}
        span = Interval(rest[0].start, rest[-1].end)
        narrowed = dataclasses.replace(fact, range=span)
        usage = cells_load(facts=[narrowed], extra_cuts={gpu.pk: cuts}).get(gpu.pk)
    points = []
    for bucket, pieces, plain in buckets:
        if plain:  # held throughout (no holding boundary inside): held_s is the bucket's
            points.append(_plain_point(bucket, sums.get(bucket.start, _NO_SUMS)))
            continue
        held_s = sum(p.seconds for p in pieces)
        m = _sum([usage.measure(p) for p in pieces] if usage is not None else [])
        points.append(
            SeriesPoint(
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
                busy_gpu_hours=(m.busy_s / 3600).quantize(SIX),
                energy_kwh=m.energy_kwh.quantize(SIX),
            )
        )
    return points

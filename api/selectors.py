"""Reads the API needs beyond filtering: availability and utilization series."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

from django.db.models import Q

from billing.engine.intervals import Interval
from billing.engine.usage import Measure
from billing.selectors.availability import as_decimal
from billing.selectors.facts import gpu_facts
from billing.selectors.usage import cells_load
from fleet.models import Gpu, Ownership

Step = Literal["hour", "day"]
STEPS: dict[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


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


def gpu_series(
    *, gpu: Gpu, owner_ids: Sequence[uuid.UUID], start: datetime, end: datetime, step: Step
) -> list[SeriesPoint]:
    """Per hour or day of ``[start, end)`` (aligned to the step, UTC), the accounting figures
    (rules 1–3) over the seconds the caller's accounts held the GPU: one load of the facts and
    cells (rollups for whole hours) for the whole range, cut at every bucket and holding."""
    width = STEPS[step]
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    window = Interval(start, end)
    held = _held(gpu=gpu, owner_ids=owner_ids, window=window)
    buckets: list[Interval] = []
    at = start
    while at < end:
        buckets.append(Interval(at, min(at + width, end)))
        at += width
    cuts = {b.start for b in buckets} | {t for h in held for t in (h.start, h.end)}
    cuts = {t for t in cuts if start < t < end}
    facts = gpu_facts(gpu_ids=[gpu.pk], start=start, end=end)
    usage = cells_load(facts=facts, extra_cuts={gpu.pk: cuts}).get(gpu.pk)
    points = []
    for bucket in buckets:
        pieces = [
            Interval(max(h.start, bucket.start), min(h.end, bucket.end))
            for h in held
            if h.start < bucket.end and h.end > bucket.start
        ]
        m = _sum([usage.measure(p) for p in pieces] if usage is not None else [])
        points.append(
            SeriesPoint(
                start=bucket.start,
                end=bucket.end,
                held_s=sum(int((p.end - p.start).total_seconds()) for p in pieces),
                in_service_s=m.in_service_s,
                up_s=m.up_s,
                down_s=m.down_s,
                maintenance_s=m.maintenance_s,
                no_data_s=m.no_data_s,
                availability=as_decimal(m.availability),
                utilization=as_decimal(m.utilization),
                busy_gpu_hours=(m.busy_s / 3600).quantize(Decimal("0.000001")),
                energy_kwh=m.energy_kwh.quantize(Decimal("0.000001")),
            )
        )
    return points

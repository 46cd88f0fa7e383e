"""Availability, utilization, busy GPU-hours and energy for any GPU, owner or cluster and any
half-open UTC range, to the second (accounting rules 1–3).

GPU figures are the GPU's own; an owner's are time-sliced by ownership and weighted by share
(an owner of half a GPU for ten days has five GPU-days of it); a cluster's are its GPUs'
while placed there. All come from the database through ``cells_load`` (rollups for clean
whole hours, windows elsewhere); ``use_rollups=False`` reads windows only — same figures.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db.models import Q

from accounts.models import Owner
from billing.engine.intervals import Interval
from billing.engine.usage import Measure, exact_decimal
from billing.selectors.facts import cluster_gpu_ids, gpu_facts
from billing.selectors.usage import cells_load
from fleet.models import Cluster, Gpu, Ownership
from fleet.services._common import require_instant

FULL_BPS = 10_000


@dataclass(frozen=True)
class Figures:
    """Sums of measures, each weighted (by share, for owners); seconds may be fractional."""

    in_service_s: Fraction
    maintenance_s: Fraction
    down_s: Fraction
    up_s: Fraction
    no_data_s: Fraction
    busy_s: Fraction
    energy_kwh: Fraction

    @classmethod
    def of(cls, weighted: Iterable[tuple[Measure, Fraction]]) -> Figures:
        sums = [Fraction(0)] * 7
        for m, w in weighted:
            values: tuple[int | Decimal, ...] = (
                m.in_service_s,
                m.maintenance_s,
                m.down_s,
                m.up_s,
                m.no_data_s,
                m.busy_s,
                m.energy_kwh,
            )
            sums = [s + Fraction(v) * w for s, v in zip(sums, values, strict=True)]
        return cls(*sums)

    @property
    def availability(self) -> Fraction | None:
        denominator = self.in_service_s - self.maintenance_s
        return self.up_s / denominator if denominator else None

    @property
    def utilization(self) -> Fraction | None:
        return self.busy_s / self.up_s if self.up_s else None

    @property
    def busy_gpu_hours(self) -> Fraction:
        return self.busy_s / 3600


@dataclass(frozen=True)
class OwnedRun:
    gpu_id: uuid.UUID
    serial: str
    interval: Interval
    share_bps: int
    measure: Measure  # the GPU's own figures over the run


@dataclass(frozen=True)
class OwnerAvailability:
    runs: list[OwnedRun]
    total: Figures  # weighted by share


@dataclass(frozen=True)
class ClusterAvailability:
    gpus: dict[uuid.UUID, Measure]
    total: Figures


def _range(start: datetime, end: datetime) -> Interval:
    # Every state is counted in whole seconds; a bound between two would count one twice.
    require_instant(start, field="start")
    require_instant(end, field="end")
    if end <= start:
        raise ValidationError({"end": "A range ends after it starts."})
    return Interval(start, end)


def gpus_availability(
    *, gpus: Sequence[Gpu], start: datetime, end: datetime, use_rollups: bool = True
) -> dict[uuid.UUID, Measure]:
    window = _range(start, end)
    facts = gpu_facts(gpu_ids=[g.pk for g in gpus], start=start, end=end)
    usage = cells_load(facts=facts, use_rollups=use_rollups)
    return {f.gpu_id: usage[f.gpu_id].measure(window) for f in facts}


def gpu_availability(
    *, gpu: Gpu, start: datetime, end: datetime, use_rollups: bool = True
) -> Measure:
    """One GPU over ``[start, end)``: in-service seconds and their states, availability,
    utilization, busy GPU-hours, energy (``Measure``)."""
    return gpus_availability(gpus=[gpu], start=start, end=end, use_rollups=use_rollups)[gpu.pk]


def owner_availability(
    *, owner: Owner, start: datetime, end: datetime, use_rollups: bool = True
) -> OwnerAvailability:
    _range(start, end)
    gpu_ids = list(
        Ownership.objects.filter(owner=owner, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list("gpu_id", flat=True)
        .distinct()
    )
    facts = gpu_facts(gpu_ids=gpu_ids, start=start, end=end)
    usage = cells_load(facts=facts, use_rollups=use_rollups)
    key = str(owner.pk)
    runs: list[OwnedRun] = []
    for fact in facts:
        merged: list[tuple[Interval, int]] = []
        for piece in fact.ownership:
            bps = piece.shares.get(key)
            if bps is None:
                continue
            if merged and merged[-1][1] == bps and merged[-1][0].end == piece.interval.start:
                merged[-1] = (Interval(merged[-1][0].start, piece.interval.end), bps)
            else:
                merged.append((piece.interval, bps))
        runs.extend(
            OwnedRun(fact.gpu_id, fact.serial, interval, bps, usage[fact.gpu_id].measure(interval))
            for interval, bps in merged
        )
    total = Figures.of((run.measure, Fraction(run.share_bps, FULL_BPS)) for run in runs)
    return OwnerAvailability(runs=runs, total=total)


def cluster_availability(
    *, cluster: Cluster, start: datetime, end: datetime, use_rollups: bool = True
) -> ClusterAvailability:
    """The cluster's GPUs while placed in it (a GPU moved away stops counting here)."""
    window = _range(start, end)
    ids = cluster_gpu_ids(cluster_id=cluster.pk, start=start, end=end)
    facts = gpu_facts(gpu_ids=ids, start=start, end=end, cluster_id=cluster.pk)
    usage = cells_load(facts=facts, use_rollups=use_rollups)
    measures = {f.gpu_id: usage[f.gpu_id].measure(window) for f in facts}
    return ClusterAvailability(
        gpus=measures, total=Figures.of((m, Fraction(1)) for m in measures.values())
    )


def as_decimal(value: Fraction | None, places: int = 6) -> Decimal | None:
    """For display and storage: a ratio rounded half-even to ``places``."""
    if value is None:
        return None
    return exact_decimal(value).quantize(Decimal(1).scaleb(-places))

"""Availability, utilization, busy GPU-hours and energy for any GPU, owner or cluster and any
half-open UTC range, to the second (accounting rules 1–3).

GPU figures are the GPU's own; an owner's are time-sliced by ownership and weighted by share
(an owner of half a GPU for ten days has five GPU-days of it); a cluster's are its GPUs'
while placed there. All come from the database through ``cells_load`` (rollups for clean
whole hours, windows elsewhere); ``use_rollups=False`` reads windows only — same figures.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db.models import Q

from accounts.models import Owner
from billing.engine.cells import CellUsage
from billing.engine.intervals import Interval, intersect
from billing.engine.usage import Measure, exact_decimal
from billing.selectors.facts import GpuFacts, cluster_gpu_ids, gpu_facts
from billing.selectors.usage import cells_load
from core.inputs import require_instant
from fleet.models import Cluster, Gpu, Ownership

FULL_BPS = 10_000
SIX = Decimal("0.000001")


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


@dataclass(frozen=True)
class HeldRun:
    """A stretch of time over which the holders' shares of a GPU stayed the same and it
    stayed in one cluster: what a statement line covers when the holders are one owner."""

    interval: Interval
    shares: dict[str, int]  # owner id (text) → basis points, the holders' only
    cluster_id: uuid.UUID  # where the GPU was placed throughout the run
    measure: Measure  # the GPU's own figures over the run (not weighted by share)

    @property
    def share_bps(self) -> int:
        return sum(self.shares.values())


@dataclass(frozen=True)
class HeldUsage:
    """One GPU's figures over the seconds the holders held it: its runs, their sum, and the
    cells to measure any part of the range that starts and ends at a cut asked for."""

    gpu_id: uuid.UUID
    runs: list[HeldRun]
    total: Measure
    usage: CellUsage | None  # None: not held in the range (nothing loaded)
    held: list[Interval] = field(default_factory=list)  # held, placed or not

    def held_seconds(self, window: Interval) -> int:
        """Seconds of ``window`` the holders held the GPU, wherever it was."""
        return sum(piece.seconds for piece in intersect(self.held, [window]))

    def pieces(self, window: Interval) -> list[Measure]:
        """The held seconds inside ``window`` (which starts and ends at a cut), run by run
        as the statement measures its lines."""
        if self.usage is None:
            return []
        return [
            self.usage.measure(
                Interval(max(r.interval.start, window.start), min(r.interval.end, window.end))
            )
            for r in self.runs
            if r.interval.start < window.end and r.interval.end > window.start
        ]

    def measure(self, window: Interval) -> Measure:
        return measure_sum(self.pieces(window))


def measure_sum(measures: Iterable[Measure]) -> Measure:
    """Measures of disjoint intervals added up (each already rounded as its line is)."""
    listed = list(measures)
    if len(listed) == 1:  # one run (most GPUs, most hours): nothing to add
        return listed[0]
    return Measure(
        in_service_s=sum(m.in_service_s for m in listed),
        maintenance_s=sum(m.maintenance_s for m in listed),
        down_s=sum(m.down_s for m in listed),
        up_s=sum(m.up_s for m in listed),
        no_data_s=sum(m.no_data_s for m in listed),
        busy_s=sum((m.busy_s for m in listed), Decimal(0)),
        energy_kwh=sum((m.energy_kwh for m in listed), Decimal(0)),
        operator_incident_s=sum(m.operator_incident_s for m in listed),
        down_without_incident_s=sum(m.down_without_incident_s for m in listed),
    )


def shown_energy_kwh(measures: Iterable[Measure]) -> Decimal:
    """Energy as lines show it, added up: each measure's kWh rounded half-even to 6 places
    first (a GPU with two lines in a month shows the sum of the two figures printed)."""
    return sum((six_places(m.energy_kwh) for m in measures), Decimal("0.000000"))


def shown_busy_gpu_hours(measures: Iterable[Measure]) -> Decimal:
    """Busy GPU-hours as lines show them, added up (see ``shown_energy_kwh``)."""
    return sum((six_places(m.busy_s / 3600) for m in measures), Decimal("0.000000"))


def six_places(value: Decimal) -> Decimal:
    return value.quantize(SIX, rounding=ROUND_HALF_EVEN)


def _held_runs(
    fact: GpuFacts, holders: set[str]
) -> tuple[list[tuple[Interval, dict[str, int], uuid.UUID]], list[Interval]]:
    """The facts' ownership slices where a holder held a share, merged while the holders'
    shares stay the same (the statement's runs, ``billing.engine.statement._owner_runs``),
    then cut where the GPU changed clusters (a statement has a line per cluster); and the
    holders' runs before that cut (held whether placed or not)."""
    runs: list[tuple[Interval, dict[str, int]]] = []
    for piece in fact.ownership:
        shares = {o: bps for o, bps in piece.shares.items() if o in holders}
        if not shares:
            continue
        if runs and runs[-1][1] == shares and runs[-1][0].end == piece.interval.start:
            runs[-1] = (Interval(runs[-1][0].start, piece.interval.end), shares)
        else:
            runs.append((piece.interval, shares))
    stays: list[tuple[uuid.UUID, Interval]] = []  # consecutive placements in one cluster
    for cluster, placed in fact.placements:
        if stays and stays[-1][0] == cluster and stays[-1][1].end == placed.start:
            stays[-1] = (cluster, Interval(stays[-1][1].start, placed.end))
        else:
            stays.append((cluster, placed))
    return [
        (piece, shares, cluster)
        for run, shares in runs
        for cluster, stay in stays
        for piece in intersect([run], [stay])
    ], [run for run, _ in runs]


def held_availability(
    *,
    gpu_ids: Sequence[uuid.UUID],
    owner_ids: Collection[uuid.UUID],
    start: datetime,
    end: datetime,
    cuts: Iterable[datetime] = (),
) -> dict[uuid.UUID, HeldUsage]:
    """These GPUs over ``[start, end)``, counting only the seconds one of ``owner_ids``
    held a share (the GPU's own figures, not weighted by share): the facts and cells the
    close reads (``gpu_facts``, ``cells_load``) measured over the same runs as the
    statement's lines (in service while placed in a cluster, a run per cluster), so a closed
    month's figures equal its lines. ``cuts``: instants the caller will also measure at
    (``HeldUsage.measure``), e.g. every hour of a strip. What no telemetry window observed is
    no data: nothing outlives the data."""
    _range(start, end)
    facts = gpu_facts(gpu_ids=list(gpu_ids), start=start, end=end, placed_only=True)
    holders = {str(o) for o in owner_ids}
    runs, held_runs = {}, {}
    for f in facts:
        runs[f.gpu_id], held_runs[f.gpu_id] = _held_runs(f, holders)
    held = [f for f in facts if runs[f.gpu_id]]
    extra = {t for t in cuts if start < t < end}
    extra_cuts: dict[uuid.UUID, set[datetime]] = {}
    for fact in held:  # cells cut where it changed clusters, as its lines are
        moves = {t for _, p in fact.placements for t in (p.start, p.end) if start < t < end}
        extra_cuts[fact.gpu_id] = extra | moves if moves else extra
    usage = cells_load(facts=held, extra_cuts=extra_cuts) if held else {}
    out: dict[uuid.UUID, HeldUsage] = {}
    for fact in facts:
        cells = usage.get(fact.gpu_id)
        measured = [
            HeldRun(interval, shares, cluster, cells.measure(interval))
            for interval, shares, cluster in runs[fact.gpu_id]
            if cells is not None
        ]
        out[fact.gpu_id] = HeldUsage(
            gpu_id=fact.gpu_id,
            runs=measured,
            total=measure_sum(r.measure for r in measured),
            usage=cells,
            held=held_runs[fact.gpu_id],
        )
    return out


def as_decimal(value: Fraction | None, places: int = 6) -> Decimal | None:
    """For display and storage: a ratio rounded half-even to ``places``."""
    if value is None:
        return None
    return exact_decimal(value).quantize(Decimal(1).scaleb(-places))

"""What the database says about GPUs over a range, as the engine's plain inputs.

Everything is loaded in a handful of set-wise queries however many GPUs there are: placements,
lifecycle, maintenance windows and incidents (resolved to GPUs through the placements: a GPU
scope follows the GPU, a node, cluster or site scope covers the GPUs placed there at the
time), ownership and rentals.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import models
from django.db.models import Q
from django.db.models.expressions import RawSQL

from billing.engine.intervals import Interval, intersect
from billing.engine.statement import OwnershipSlice, RateTerms, Rental
from billing.models import RateCard, RentalGpu
from fleet.models import (
    Gpu,
    Incident,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Ownership,
    Placement,
)

FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass
class GpuFacts:
    gpu_id: uuid.UUID
    serial: str
    range: Interval
    in_service: list[Interval] = field(default_factory=list)  # in service (and placed in scope)
    maintenance: list[Interval] = field(default_factory=list)
    incidents: list[Interval] = field(default_factory=list)
    operator_incidents: list[Interval] = field(default_factory=list)
    ownership: list[OwnershipSlice] = field(default_factory=list)  # owner key: str(owner id)
    rentals: list[tuple[str, Rental]] = field(default_factory=list)  # (currency, rental)
    # Maintenance and incidents that touched the GPU, as frozen with its statements:
    # [kind, id, title, cause, starts_at, ends_at or None] (instants as ISO 8601 with Z).
    events: list[list[object]] = field(default_factory=list)

    def owner_ids(self) -> set[str]:
        return {owner for s in self.ownership for owner in s.shares}

    def boundaries(self) -> set[datetime]:
        """Every instant inside the range where a figure's inputs change."""
        cuts: set[datetime] = set()
        for intervals in (
            self.in_service,
            self.maintenance,
            self.incidents,
            self.operator_incidents,
            [s.interval for s in self.ownership],
            [r.interval for _, r in self.rentals],
        ):
            for interval in intervals:
                cuts.update((interval.start, interval.end))
        return {t for t in cuts if self.range.start < t < self.range.end}


def _one_of(gpu_ids: Sequence[uuid.UUID]) -> Callable[..., RawSQL]:
    """``gpu_id = ANY(%s)`` with the ids as one array parameter: ``gpu_id__in`` binds one
    parameter per id, which costs more than the query itself for a cluster of GPUs."""
    array = [str(g) for g in gpu_ids]

    def condition(model: type[models.Model], column: str = "gpu_id") -> RawSQL:
        table = model._meta.db_table
        return RawSQL(  # noqa: S611 - table and column names come from the models
            f'"{table}"."{column}" = ANY(%s::uuid[])',
            [array],
            output_field=models.BooleanField(),
        )

    return condition


def _interval(a: datetime, b: datetime | None) -> Interval:
    return Interval(a, b if b is not None else FAR_FUTURE)


def gpu_facts(
    *,
    gpu_ids: Sequence[uuid.UUID],
    start: datetime,
    end: datetime,
    cluster_id: uuid.UUID | None = None,
) -> list[GpuFacts]:
    """Facts for the given GPUs over ``[start, end)``; with ``cluster_id``, in-service time
    only counts while the GPU was placed in that cluster."""
    window = Interval(start, end)
    ids = _one_of(gpu_ids)
    serials = dict(Gpu.objects.filter(ids(Gpu, "id")).values_list("pk", "serial"))
    facts = {g: GpuFacts(gpu_id=g, serial=serials[g], range=window) for g in gpu_ids}

    placements = list(
        Placement.objects.filter(ids(Placement), valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list(
            "gpu_id",
            "node_id",
            "node__cluster_id",
            "node__cluster__site_id",
            "valid_from",
            "valid_to",
        )
    )
    by_scope: dict[tuple[str, object], list[tuple[uuid.UUID, Interval]]] = defaultdict(list)
    in_cluster: dict[uuid.UUID, list[Interval]] = defaultdict(list)
    for gpu_id, node_id, cluster, site, valid_from, valid_to in placements:
        placed = _interval(valid_from, valid_to)
        by_scope["node", node_id].append((gpu_id, placed))
        by_scope["cluster", cluster].append((gpu_id, placed))
        by_scope["site", site].append((gpu_id, placed))
        if cluster == cluster_id:
            in_cluster[gpu_id].append(placed)

    transitions = LifecycleTransition.objects.filter(ids(LifecycleTransition), at__lt=end).order_by(
        "gpu_id", "at"
    )
    for gpu_id, rows in itertools.groupby(
        transitions.values_list("gpu_id", "at", "state"), key=lambda r: r[0]
    ):
        listed = list(rows)
        service = [
            Interval(at, following[1] if following else FAR_FUTURE)
            for (_, at, state), following in zip(listed, [*listed[1:], None], strict=True)
            if state == LifecycleState.IN_SERVICE
        ]
        if cluster_id is not None:
            service = intersect(service, in_cluster.get(gpu_id, []))
        facts[gpu_id].in_service = intersect(service, [window])

    def resolve(
        scoped: MaintenanceWindow | Incident, interval: Interval
    ) -> Iterable[tuple[uuid.UUID, Interval]]:
        if scoped.gpu_id is not None:
            if scoped.gpu_id in facts:
                yield scoped.gpu_id, interval
            return
        if scoped.node_id is not None:
            key: tuple[str, object] = ("node", scoped.node_id)
        elif scoped.cluster_id is not None:
            key = ("cluster", scoped.cluster_id)
        else:
            key = ("site", scoped.site_id)
        for gpu_id, placed in by_scope.get(key, []):
            for piece in intersect([placed], [interval]):
                yield gpu_id, piece

    maintenance = MaintenanceWindow.objects.filter(
        cancelled_at__isnull=True, starts_at__lt=end, ends_at__gt=start
    )
    for mw in maintenance.order_by("starts_at", "pk"):
        for gpu_id, piece in resolve(mw, Interval(mw.starts_at, mw.ends_at)):
            facts[gpu_id].maintenance.append(piece)
            _event(facts[gpu_id], "maintenance", mw.pk, mw.title, "", mw.starts_at, mw.ends_at)
    incidents = Incident.objects.filter(started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    )
    for incident in incidents.order_by("started_at", "pk"):
        for gpu_id, piece in resolve(incident, _interval(incident.started_at, incident.ended_at)):
            facts[gpu_id].incidents.append(piece)
            _event(
                facts[gpu_id],
                "incident",
                incident.pk,
                incident.title,
                incident.cause,
                incident.started_at,
                incident.ended_at,
            )
            if incident.operator_caused:
                facts[gpu_id].operator_incidents.append(piece)

    ownership_rows = (
        Ownership.objects.filter(ids(Ownership), valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .order_by("gpu_id", "valid_from")
        .values_list("gpu_id", "owner_id", "share_bps", "valid_from", "valid_to")
    )
    for gpu_id, owned in itertools.groupby(ownership_rows, key=lambda r: r[0]):
        facts[gpu_id].ownership = _slices(list(owned), window)

    rentals = (
        RentalGpu.objects.filter(
            ids(RentalGpu), rental__starts_at__lt=end, rental__ends_at__gt=start
        )
        .order_by("rental__starts_at", "rental_id")
        .values_list(
            "gpu_id",
            "rental__cluster_id",
            "rental__currency",
            "rental__starts_at",
            "rental__ends_at",
            "rental__rate_per_gpu_hour",
        )
    )
    for gpu_id, cluster, currency, starts_at, ends_at, rate in rentals:
        if cluster_id is None or cluster == cluster_id:
            facts[gpu_id].rentals.append((currency, Rental(Interval(starts_at, ends_at), rate)))

    for fact in facts.values():
        for name in ("maintenance", "incidents", "operator_incidents"):
            setattr(fact, name, intersect(getattr(fact, name), [window]))
    return [facts[g] for g in sorted(gpu_ids, key=lambda g: facts[g].serial)]


def _event(
    fact: GpuFacts,
    kind: str,
    pk: int,
    title: str,
    cause: str,
    starts_at: datetime,
    ends_at: datetime | None,
) -> None:
    """Once per event and GPU (a GPU placed twice in a node's scope meets it twice)."""
    record: list[object] = [kind, pk, title, cause, _iso(starts_at), _iso(ends_at)]
    if record not in fact.events:
        fact.events.append(record)


def _iso(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z") if at is not None else None


def _slices(
    rows: list[tuple[uuid.UUID, uuid.UUID, int, datetime, datetime | None]], window: Interval
) -> list[OwnershipSlice]:
    cuts = {window.start, window.end}
    for _, _, _, valid_from, valid_to in rows:
        cuts.update(
            t for t in (valid_from, valid_to) if t is not None and window.start < t < window.end
        )
    slices: list[OwnershipSlice] = []
    for a, b in itertools.pairwise(sorted(cuts)):
        shares = {
            str(owner): bps
            for _, owner, bps, valid_from, valid_to in rows
            if valid_from <= a and (valid_to is None or valid_to > a)
        }
        if slices and dict(slices[-1].shares) == shares:
            slices[-1] = OwnershipSlice(Interval(slices[-1].interval.start, b), shares)
        elif shares:
            slices.append(OwnershipSlice(Interval(a, b), shares))
    return slices


def cluster_gpu_ids(*, cluster_id: uuid.UUID, start: datetime, end: datetime) -> list[uuid.UUID]:
    """GPUs placed in the cluster at any time in ``[start, end)``."""
    return list(
        Placement.objects.filter(node__cluster_id=cluster_id, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list("gpu_id", flat=True)
        .distinct()
    )


def rate_terms(
    *, cluster_id: uuid.UUID, currency: str, start: datetime, end: datetime
) -> list[RateTerms]:
    cards = (
        RateCard.objects.filter(cluster_id=cluster_id, currency=currency, effective_from__lt=end)
        .filter(Q(effective_to__isnull=True) | Q(effective_to__gt=start))
        .order_by("effective_from")
    )
    return [
        RateTerms(
            interval=_interval(card.effective_from, card.effective_to),
            hosting_fee_per_gpu_month=card.hosting_fee_per_gpu_month,
            price_per_kwh=card.price_per_kwh,
            pue=card.pue,
            management_fee_pct=card.management_fee_pct,
            waive_hosting_in_operator_incidents=card.waive_hosting_in_operator_incidents,
        )
        for card in cards
    ]


def rate_boundaries(terms: Sequence[RateTerms], window: Interval) -> set[datetime]:
    cuts = {t for term in terms for t in (term.interval.start, term.interval.end)}
    return {t for t in cuts if window.start < t < window.end}

"""Where a period's close stands, step by step: what the guided close page shows.

Nothing here decides whether the close may go on: the services do, and this reads their own
checks (``period_close_refusals``: the checks ``period_close_start`` runs) and the close's own
facts (``cluster_facts``: what ``statements_compute`` computes each cluster from), so the
page says what the services will say. Writes nothing.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, Max, Q

from accounts.models import Owner
from billing.engine.intervals import Interval, intersect, subtract
from billing.models import Period, Rental, Statement
from billing.selectors.facts import pool_amounts
from billing.services.computing import cluster_facts, clusters_in
from fleet.models import Cluster

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class RateGap:
    """Time of the period no rate card of ``currency`` covers in ``cluster``; ``in_service``:
    a GPU of the cluster was in service in it, so the close refuses the period."""

    cluster: Cluster
    currency: str
    start: datetime
    end: datetime
    in_service: bool


@dataclass
class ClusterRevenue:
    """What a cluster earned in the period, as entered: rentals and pool amounts."""

    cluster: Cluster
    rentals: int = 0
    pools: dict[str, Decimal] = field(default_factory=dict)
    currencies: list[str] = field(default_factory=list)  # its holders' billing currencies
    refused: str = ""  # what the close would refuse about its revenue (a currency mismatch)

    @property
    def entered(self) -> bool:
        return bool(self.rentals or any(self.pools.values()))


@dataclass(frozen=True)
class OwnerChange:
    """An owner's net for the period (GPU lines plus adjustments) against the period before."""

    owner: Owner
    currency: str
    net: Decimal | None  # None: no statement this period
    previous: Decimal | None  # None: no statement the period before

    @property
    def difference(self) -> Decimal | None:
        if self.net is None and self.previous is None:
            return None
        return (self.net or ZERO) - (self.previous or ZERO)


@dataclass(frozen=True)
class PeriodStatements:
    """A period's statements by status, when they were last computed, and how many of the
    requested ones ``requester`` requested (who may not approve them too)."""

    counts: dict[str, int]
    last_computed: datetime | None
    requested_by_requester: int

    def of(self, status: str) -> int:
        return self.counts.get(status, 0)

    def labelled(self) -> list[tuple[str, int]]:
        """Every status, in order, with its label and count."""
        return [(str(label), self.of(value)) for value, label in Statement.Status.choices]


def period_statements(*, period: Period, requester: object = None) -> PeriodStatements:
    """One query: a period's statements tallied (``PeriodStatements``)."""
    sums: dict[str, Any] = {
        f"n_{value}": Count("pk", filter=Q(status=value)) for value in Statement.Status.values
    }
    if requester is not None:
        mine = Q(status=Statement.Status.PUBLISH_REQUESTED, requested_by=requester)
        sums["mine"] = Count("pk", filter=mine)
    tally = Statement.objects.filter(period=period).aggregate(last=Max("computed_at"), **sums)
    counts = {value: int(tally[f"n_{value}"]) for value in Statement.Status.values}
    return PeriodStatements(counts, tally["last"], int(tally.get("mine", 0)))


@dataclass(frozen=True)
class CloseInputs:
    gaps: list[RateGap]
    revenue: list[ClusterRevenue]


def close_inputs(*, period: Period) -> CloseInputs:
    """Rate-card coverage and revenue of each cluster with GPUs in the period, from the
    facts the close computes it from."""
    window = Interval(period.start, period.end)
    cluster_ids = clusters_in(window)
    clusters = Cluster.objects.select_related("site").in_bulk(cluster_ids)
    rentals = dict(
        Rental.objects.filter(
            cluster_id__in=cluster_ids, starts_at__lt=period.end, ends_at__gt=period.start
        )
        .values_list("cluster_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    pools = pool_amounts(period_id=period.pk)
    gaps: list[RateGap] = []
    revenue: list[ClusterRevenue] = []
    for cluster_id in cluster_ids:
        cluster = clusters[cluster_id]
        row = ClusterRevenue(
            cluster=cluster, rentals=rentals.get(cluster_id, 0), pools=pools.get(cluster_id, {})
        )
        revenue.append(row)
        try:
            prepared = cluster_facts(period, window, cluster_id)
        except ValidationError as error:
            row.refused = " ".join(error.messages)
            continue
        if prepared is None:
            continue
        row.currencies = list(prepared.currencies)
        in_service = [i for fact in prepared.facts for i in fact.in_service]
        for currency in prepared.currencies:
            cards = [terms.interval for terms in prepared.terms[currency]]
            gaps += [
                RateGap(cluster, currency, gap.start, gap.end, bool(intersect([gap], in_service)))
                for gap in subtract([window], cards)
            ]
    revenue.sort(key=lambda r: (r.cluster.site.code, r.cluster.code))
    gaps.sort(key=lambda g: (g.cluster.site.code, g.cluster.code, g.currency, g.start))
    return CloseInputs(gaps=gaps, revenue=revenue)


def previous_period(*, period: Period) -> Period | None:
    return Period.objects.filter(start__lt=period.start).order_by("-start").first()


def owner_changes(*, period: Period, previous: Period | None) -> list[OwnerChange]:
    """Each owner's net this period against the period before, by currency, by name."""
    nets: dict[tuple[uuid.UUID, str], list[Decimal | None]] = defaultdict(lambda: [None, None])
    owners: dict[uuid.UUID, Owner] = {}
    for index, of in enumerate((period, previous)):
        if of is None:
            continue
        for statement in Statement.objects.filter(period=of).select_related("owner"):
            owners[statement.owner_id] = statement.owner
            key = (statement.owner_id, statement.currency)
            nets[key][index] = statement.lines_total + statement.adjustments_total
    changes = [
        OwnerChange(owners[owner_id], currency, net, before)
        for (owner_id, currency), (net, before) in nets.items()
    ]
    return sorted(changes, key=lambda c: (c.owner.legal_name, c.currency))

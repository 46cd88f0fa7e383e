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
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from django.db import connection, models
from django.db.models import Q

from billing.engine.intervals import Interval, intersect
from billing.engine.statement import OwnershipSlice, PoolBasis, RateTerms, Rental
from billing.models import ClusterBilling, PoolRevenue, RateCard, RentalGpu
from billing.models import Rental as RentalRow
from core.instants import iso_z
from fleet.models import (
    Cluster,
    Gpu,
    Incident,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Node,
    Ownership,
    Placement,
    operator_caused,
)

FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


def pool_basis_in_force(*, cluster_id: uuid.UUID, at: datetime) -> PoolBasis:
    """How a cluster's pool is split at ``at``: the basis of its latest setting that took
    effect at or before it, up seconds when it has none. Every reader of the basis asks here.

    For a period, ask at its start: a change takes effect only at a period's start
    (``cluster_pool_basis_set``), so one basis holds for the whole period, and a period
    recomputed later (reconciliation) gets the basis it was computed with."""
    return pool_bases_in_force(cluster_ids=[cluster_id], at=at)[cluster_id]


def pool_bases_in_force(
    *, cluster_ids: Collection[uuid.UUID], at: datetime
) -> dict[uuid.UUID, PoolBasis]:
    """``pool_basis_in_force`` of each of these clusters, from one query."""
    latest = dict(
        ClusterBilling.objects.filter(cluster_id__in=list(cluster_ids), effective_from__lte=at)
        .order_by("cluster_id", "-effective_from")
        .distinct("cluster_id")
        .values_list("cluster_id", "pool_split_basis")
    )
    return {c: PoolBasis(latest[c]) if c in latest else PoolBasis.UP_SECONDS for c in cluster_ids}


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
    # Where it was placed within the range: (cluster id, interval), oldest first.
    placements: list[tuple[uuid.UUID, Interval]] = field(default_factory=list)
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


def _table(model: type[models.Model]) -> str:
    return model._meta.db_table


# The facts' reads, as SQL, sent five and two to a round trip: one statement each, the GPUs
# as one ``uuid[]`` parameter (an ``IN`` list binds a parameter per id, which costs more than
# the query for a cluster), and no ORM compiling on the way (a series reads one GPU's facts
# per request). Table names come from the models; values only as parameters.
_SERIALS = f"SELECT id, serial FROM {_table(Gpu)} WHERE id = ANY(%(gpus)s::uuid[])"  # noqa: S608
_PLACEMENTS = f"""
SELECT p.gpu_id, p.node_id, n.cluster_id, c.site_id, p.valid_from, p.valid_to
  FROM {_table(Placement)} p
  JOIN {_table(Gpu)} g ON g.id = p.gpu_id
  JOIN {_table(Node)} n ON n.id = p.node_id
  JOIN {_table(Cluster)} c ON c.id = n.cluster_id
 WHERE p.gpu_id = ANY(%(gpus)s::uuid[])
   AND p.valid_from < %(end)s AND (p.valid_to IS NULL OR p.valid_to > %(start)s)
 ORDER BY g.serial, p.valid_from
"""  # noqa: S608
_TRANSITIONS = f"""
SELECT gpu_id, at, state FROM {_table(LifecycleTransition)}
 WHERE gpu_id = ANY(%(gpus)s::uuid[]) AND at < %(end)s
 ORDER BY gpu_id, at
"""  # noqa: S608
# Maintenance and incidents whose scope can reach the GPUs: the GPU itself, or a node,
# cluster or site where one of them was placed in the range.
_IN_SCOPE = """
   AND (gpu_id = ANY(%(gpus)s::uuid[]) OR node_id = ANY(%(nodes)s::uuid[])
        OR cluster_id = ANY(%(clusters)s::uuid[]) OR site_id = ANY(%(sites)s::uuid[]))
"""
_MAINTENANCE = f"""
SELECT id, gpu_id, node_id, cluster_id, site_id, title, starts_at, ends_at
  FROM {_table(MaintenanceWindow)}
 WHERE cancelled_at IS NULL AND starts_at < %(end)s AND ends_at > %(start)s {_IN_SCOPE}
 ORDER BY starts_at, id
"""  # noqa: S608
_INCIDENTS = f"""
SELECT id, gpu_id, node_id, cluster_id, site_id, title, cause, started_at, ended_at
  FROM {_table(Incident)}
 WHERE started_at < %(end)s AND (ended_at IS NULL OR ended_at > %(start)s) {_IN_SCOPE}
 ORDER BY started_at, id
"""  # noqa: S608
_OWNERSHIP = f"""
SELECT gpu_id, owner_id, share_bps, valid_from, valid_to FROM {_table(Ownership)}
 WHERE gpu_id = ANY(%(gpus)s::uuid[])
   AND valid_from < %(end)s AND (valid_to IS NULL OR valid_to > %(start)s)
 ORDER BY gpu_id, valid_from
"""  # noqa: S608
_RENTALS = f"""
SELECT rg.gpu_id, r.cluster_id, r.currency, r.starts_at, r.ends_at, r.rate_per_gpu_hour
  FROM {_table(RentalGpu)} rg JOIN {_table(RentalRow)} r ON r.id = rg.rental_id
 WHERE rg.gpu_id = ANY(%(gpus)s::uuid[]) AND r.starts_at < %(end)s AND r.ends_at > %(start)s
 ORDER BY r.starts_at, rg.rental_id
"""  # noqa: S608


# psycopg's own timestamptz loader, in C. Django's wraps it to give every value the
# connection's time zone, which is the session's own where that is UTC (Django sets the
# session's TimeZone to it), at ~3 × the cost: a close reads ~40,000 instants of facts.
_TIMESTAMPTZ = psycopg.adapters.get_loader(
    psycopg.postgres.types["timestamptz"].oid, psycopg.pq.Format.TEXT
)


def _interval(a: datetime, b: datetime | None) -> Interval:
    return Interval(a, b if b is not None else FAR_FUTURE)


def _uuids(values: Iterable[object]) -> str:
    """The ids as one ``uuid[]`` literal: psycopg would quote-check a list element by element
    in Python (~70k ids for a close's seven queries per cluster), a UUID's text needs none."""
    return "{" + ",".join(sorted({str(v) for v in values if v is not None})) + "}"


def gpu_facts(
    *,
    gpu_ids: Sequence[uuid.UUID],
    start: datetime,
    end: datetime,
    cluster_id: uuid.UUID | None = None,
    placed_only: bool = False,
) -> list[GpuFacts]:
    """Facts for the given GPUs over ``[start, end)``; with ``cluster_id``, in-service time
    only counts while the GPU was placed in that cluster; with ``placed_only``, while it was
    placed in any (as a close counts it: a GPU between placements is on no statement)."""
    rows = _FactRows.load(gpu_ids, start, end)
    return rows.facts(gpu_ids, cluster_id=cluster_id, placed_only=placed_only)


def gpu_facts_by_cluster(
    *, gpu_ids: Mapping[uuid.UUID, Sequence[uuid.UUID]], start: datetime, end: datetime
) -> dict[uuid.UUID, list[GpuFacts]]:
    """``gpu_facts(…, cluster_id=c)`` for each cluster ``c`` and its GPUs, from one set of
    queries for all of them (a redraft of one owner with GPUs in many clusters)."""
    rows = _FactRows.load([g for ids in gpu_ids.values() for g in ids], start, end)
    return {c: rows.facts(ids, cluster_id=c) for c, ids in gpu_ids.items()}


@dataclass
class _FactRows:
    """What the facts of some GPUs are made of, as read in one go."""

    window: Interval
    serials: dict[uuid.UUID, str]
    placements: list[tuple[Any, ...]]
    transitions: list[tuple[Any, ...]]
    maintenance: list[tuple[Any, ...]]
    incidents: list[tuple[Any, ...]]
    ownership: list[tuple[Any, ...]]
    rentals: list[tuple[Any, ...]]

    @classmethod
    def load(cls, gpu_ids: Iterable[uuid.UUID], start: datetime, end: datetime) -> _FactRows:
        params: dict[str, Any] = {"gpus": _uuids(gpu_ids), "start": start, "end": end}
        with connection.cursor() as cursor:
            if connection.timezone_name == "UTC" and _TIMESTAMPTZ is not None:
                cursor.cursor.adapters.register_loader("timestamptz", _TIMESTAMPTZ)

            def results(*statements: str) -> list[list[tuple[Any, ...]]]:
                """The statements' rows, each statement's apart, from one round trip."""
                cursor.execute(";\n".join(statements), params)
                found = [list(cursor.fetchall())]
                while cursor.nextset():
                    found.append(list(cursor.fetchall()))
                return found

            serials, placements, transitions, ownership, rentals = results(
                _SERIALS, _PLACEMENTS, _TRANSITIONS, _OWNERSHIP, _RENTALS
            )
            # Maintenance and incidents reach the GPUs through where they were placed.
            params["nodes"] = _uuids(p[1] for p in placements)
            params["clusters"] = _uuids(p[2] for p in placements)
            params["sites"] = _uuids(p[3] for p in placements)
            maintenance, incidents = results(_MAINTENANCE, _INCIDENTS)
            return cls(
                Interval(start, end),
                dict(serials),
                placements,
                transitions,
                maintenance,
                incidents,
                ownership,
                rentals,
            )

    def facts(
        self,
        gpu_ids: Sequence[uuid.UUID],
        *,
        cluster_id: uuid.UUID | None = None,
        placed_only: bool = False,
    ) -> list[GpuFacts]:
        """The facts of these GPUs (all of them among those loaded)."""
        window = self.window
        facts = {g: GpuFacts(gpu_id=g, serial=self.serials[g], range=window) for g in gpu_ids}
        by_scope: dict[tuple[str, object], list[tuple[uuid.UUID, Interval]]] = defaultdict(list)
        in_cluster: dict[uuid.UUID, list[Interval]] = defaultdict(list)
        for gpu_id, node_id, cluster, site, valid_from, valid_to in self.placements:
            if gpu_id not in facts:
                continue
            placed = _interval(valid_from, valid_to)
            by_scope["node", node_id].append((gpu_id, placed))
            by_scope["cluster", cluster].append((gpu_id, placed))
            by_scope["site", site].append((gpu_id, placed))
            if cluster == cluster_id:
                in_cluster[gpu_id].append(placed)
            for piece in intersect([placed], [window]):
                facts[gpu_id].placements.append((cluster, piece))

        for gpu_id, grouped in itertools.groupby(self.transitions, key=lambda r: r[0]):
            if gpu_id not in facts:
                continue
            listed = list(grouped)
            service = [
                Interval(at, following[1] if following else FAR_FUTURE)
                for (_, at, state), following in zip(listed, [*listed[1:], None], strict=True)
                if state == LifecycleState.IN_SERVICE
            ]
            if cluster_id is not None:
                service = intersect(service, in_cluster.get(gpu_id, []))
            elif placed_only:
                service = intersect(service, [p for _, p in facts[gpu_id].placements])
            facts[gpu_id].in_service = intersect(service, [window])

        def resolve(
            scope: tuple[Any, Any, Any, Any], interval: Interval
        ) -> Iterable[tuple[uuid.UUID, Interval]]:
            """The GPUs an event scoped to (gpu, node, cluster, site) touched, and when."""
            gpu, node, cluster, site = scope
            if gpu is not None:
                if gpu in facts:
                    yield gpu, interval
                return
            if node is not None:
                key: tuple[str, object] = ("node", node)
            elif cluster is not None:
                key = ("cluster", cluster)
            else:
                key = ("site", site)
            for gpu_id, placed in by_scope.get(key, []):
                for piece in intersect([placed], [interval]):
                    yield gpu_id, piece

        for pk, *scope, title, starts_at, ends_at in self.maintenance:
            for gpu_id, piece in resolve(tuple(scope), Interval(starts_at, ends_at)):
                facts[gpu_id].maintenance.append(piece)
                _event(facts[gpu_id], "maintenance", pk, title, "", starts_at, ends_at)
        for pk, *scope, title, cause, started_at, ended_at in self.incidents:
            interval = _interval(started_at, ended_at)
            for gpu_id, piece in resolve(tuple(scope), interval):
                facts[gpu_id].incidents.append(piece)
                _event(facts[gpu_id], "incident", pk, title, cause, started_at, ended_at)
                if operator_caused(cause):
                    facts[gpu_id].operator_incidents.append(piece)

        for gpu_id, owned in itertools.groupby(self.ownership, key=lambda r: r[0]):
            if gpu_id in facts:
                facts[gpu_id].ownership = _slices(list(owned), window)

        for gpu_id, cluster, currency, starts_at, ends_at, rate in self.rentals:
            if gpu_id in facts and (cluster_id is None or cluster == cluster_id):
                facts[gpu_id].rentals.append((currency, Rental(Interval(starts_at, ends_at), rate)))

        for fact in facts.values():
            for name in ("maintenance", "incidents", "operator_incidents"):
                if getattr(fact, name):  # most GPUs have none: nothing to clip
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
    return iso_z(at) if at is not None else None


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
    return [g for _, g in cluster_gpu_ids_many(cluster_ids=[cluster_id], start=start, end=end)]


def cluster_gpu_ids_many(
    *, cluster_ids: Collection[uuid.UUID], start: datetime, end: datetime
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(cluster, GPU) for every GPU placed in one of these clusters at any time in
    ``[start, end)``, once each."""
    return list(
        Placement.objects.filter(node__cluster_id__in=list(cluster_ids), valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list("node__cluster_id", "gpu_id")
        .distinct()
    )


_POOL_AMOUNTS = f"""
SELECT cluster_id, currency, sum(amount) FROM {_table(PoolRevenue)}
 WHERE period_id = %(period)s {{clusters}}
 GROUP BY cluster_id, currency
 ORDER BY cluster_id, currency
"""  # noqa: S608 - table names from the models


def pool_amounts(
    *, period_id: int, cluster_ids: Collection[uuid.UUID] | None = None
) -> dict[uuid.UUID, dict[str, Decimal]]:
    """The pool revenue entered for a period, per cluster and currency, summed (every
    cluster's, or these clusters')."""
    only = "" if cluster_ids is None else "AND cluster_id = ANY(%(clusters)s::uuid[])"
    pools: dict[uuid.UUID, dict[str, Decimal]] = defaultdict(dict)
    with connection.cursor() as cursor:
        cursor.execute(
            _POOL_AMOUNTS.format(clusters=only),
            {"period": period_id, "clusters": _uuids(cluster_ids or ())},
        )
        for cluster_id, currency, total in cursor.fetchall():
            pools[cluster_id][currency] = total
    return pools


# Rate cards of some clusters and currencies in force at some time in ``[start, end)``.
_RATE_CARDS = f"""
SELECT cluster_id, currency, effective_from, effective_to, hosting_fee_per_gpu_month,
       price_per_kwh, pue, management_fee_pct, waive_hosting_in_operator_incidents,
       waive_hosting_when_down
  FROM {_table(RateCard)}
 WHERE cluster_id = ANY(%(clusters)s::uuid[]) AND currency = ANY(%(currencies)s::text[])
   AND effective_from < %(end)s AND (effective_to IS NULL OR effective_to > %(start)s)
 ORDER BY effective_from
"""  # noqa: S608 - table names from the models


def rate_terms_many(
    *, keys: Collection[tuple[uuid.UUID, str]], start: datetime, end: datetime
) -> dict[tuple[uuid.UUID, str], list[RateTerms]]:
    """The rate cards in force at some time in ``[start, end)`` of each (cluster, currency),
    oldest first, from one query."""
    found: dict[tuple[uuid.UUID, str], list[RateTerms]] = {key: [] for key in keys}
    if not found:
        return found
    with connection.cursor() as cursor:
        cursor.execute(
            _RATE_CARDS,
            {
                "clusters": _uuids(c for c, _ in found),
                "currencies": sorted({currency for _, currency in found}),
                "start": start,
                "end": end,
            },
        )
        cards = cursor.fetchall()
    for (
        cluster_id,
        currency,
        valid_from,
        valid_to,
        fee,
        price,
        pue,
        pct,
        waive_op,
        waive_down,
    ) in cards:
        terms = found.get((cluster_id, currency))
        if terms is None:  # a currency asked for of another cluster only
            continue
        terms.append(
            RateTerms(
                interval=_interval(valid_from, valid_to),
                hosting_fee_per_gpu_month=fee,
                price_per_kwh=price,
                pue=pue,
                management_fee_pct=pct,
                waive_hosting_in_operator_incidents=waive_op,
                waive_hosting_when_down=waive_down,
            )
        )
    return found


def rate_boundaries(terms: Sequence[RateTerms], window: Interval) -> set[datetime]:
    cuts = {t for term in terms for t in (term.interval.start, term.interval.end)}
    return {t for t in cuts if window.start < t < window.end}

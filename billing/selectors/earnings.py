"""An owner's earnings for a period, final or preliminary, as the statements reckon them.

Final: the period's published statement — the sums of its GPU lines, as stored.
Preliminary: anything else (the running month so far, an open or closing period, a draft
not yet published) — computed now by the statements' own code
(``billing.services.computing.statements_compute``) for these owners only, up to now,
writing nothing. There is no second formula: a preliminary figure for a whole period equals
the draft statement the close would write from the same data.

Revenue so far is what is known: rentals accrue as rate × up seconds so far, but a pool is
one amount the operator enters for a cluster and period, usually after it ends. Until every
cluster the owner's GPUs were in has its pool entered (``pool_pending``), the revenue is
incomplete: the costs so far are real, yet gross − costs would set them against revenue
that is partly missing, so such a figure carries no net (``net_shown`` is None).

Only what the figures need is computed (``_preliminary_lines``): the lines of these owners'
GPUs, without the frozen inputs, content and hash a stored draft carries, and with cells cut
where the statements cut them except at each midnight (a statement's cells end at every UTC
midnight for its report's days; midnights are hour boundaries, so every measure is the same).
A cluster's other GPUs are computed too when they can change these lines or refuse them as
the close would: when a pool is entered (it is split over all the cluster's GPUs) or when
rate cards leave part of the period uncovered (any GPU in service then refuses the period).
``tests/billing/test_earnings_lean.py`` holds the sums equal to ``statements_compute``'s.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, Sum

from accounts.models import Disclosure, Owner
from billing.engine.document import gpu_inputs_from_frozen, rates_from_frozen
from billing.engine.intervals import Interval, intersect, subtract
from billing.engine.money import split_largest_remainder
from billing.engine.statement import (
    GpuInputs,
    Line,
    OwnershipSlice,
    PoolBasis,
    gpu_lines,
    pool_split,
)
from billing.models import Period, PoolRevenue, Statement, StatementLine
from billing.selectors.facts import GpuFacts, rate_boundaries
from billing.selectors.usage import cells_load_many
from billing.services.computing import ClusterFacts, clusters_facts, clusters_in
from fleet.models import Ownership, Placement
from telemetry.services.collector import collector_paused

ZERO = Decimal("0.00")
DAY = timedelta(days=1)
# The costs every net figure has had taken off, in the statements' order.
COSTS_INCLUDED = ("hosting_fee", "power_cost", "management_fee")


@dataclass(frozen=True)
class Earnings:
    """One owner's GPU lines summed, in one currency, over ``[start, end)``."""

    owner_id: uuid.UUID
    currency: str
    start: datetime
    end: datetime  # now, for a running period: the figures so far
    period_end: datetime  # where the period itself ends
    final: bool
    statement_id: uuid.UUID | None  # the published statement, when final
    lines: int
    gross: Decimal
    hosting_fee: Decimal
    power_cost: Decimal
    management_fee: Decimal
    net: Decimal
    # Preliminary only: a cluster the owner's GPUs were in has no pool revenue entered for
    # the period yet, so gross holds rentals (and the pools entered) only.
    pool_pending: bool = False

    @property
    def to_date(self) -> bool:
        return self.end < self.period_end

    @property
    def revenue_complete(self) -> bool:
        return self.final or not self.pool_pending

    @property
    def net_shown(self) -> Decimal | None:
        """The net, or None while revenue is incomplete (never costs against missing revenue)."""
        return self.net if self.revenue_complete else None


def _total(amounts: Iterable[Decimal]) -> Decimal:
    return sum(amounts, ZERO)


def statement_gpu_sums(*, statements: Collection[Statement]) -> dict[uuid.UUID, dict[str, Any]]:
    """Per statement, its GPU lines summed (``lines``, ``gross``, each fee, ``net``), one
    query; a statement with no GPU line is absent."""
    return {
        row["statement_id"]: dict(row)
        for row in StatementLine.objects.filter(
            statement__in=[s.pk for s in statements], kind=StatementLine.Kind.GPU
        )
        .values("statement_id")
        .annotate(
            lines=Count("id"),
            gross=Sum("gross"),
            hosting_fee=Sum("hosting_fee"),
            power_cost=Sum("power_cost"),
            management_fee=Sum("management_fee"),
            net=Sum("net"),
        )
        .order_by()
    }


def owner_earnings(
    *,
    owner_ids: Collection[uuid.UUID],
    start: datetime,
    end: datetime,
    now: datetime,
    disclosure: Disclosure,
) -> list[Earnings]:
    """Per owner and currency, the earnings of the period ``[start, end)`` as of ``now``
    (ordered by owner id, then currency). Owners with no GPU line and no statement in the
    period are absent."""
    period = Period.objects.filter(start=start).first() or Period(start=start, end=end)
    wanted = {str(o) for o in owner_ids}
    out: list[Earnings] = []
    published = (
        Statement.objects.filter(
            owner_id__in=list(owner_ids),
            period_id=period.pk,
            status=Statement.Status.PUBLISHED,
        )
        if period.pk is not None
        else Statement.objects.none()
    )
    statements = list(published.order_by("owner_id", "currency"))
    sums = statement_gpu_sums(statements=statements)
    for statement in statements:
        row = sums.get(statement.pk, {})
        out.append(
            Earnings(
                owner_id=statement.owner_id,
                currency=statement.currency,
                start=period.start,
                end=period.end,
                period_end=period.end,
                final=True,
                statement_id=statement.pk,
                lines=int(row.get("lines", 0)),
                gross=row.get("gross") or ZERO,
                hosting_fee=row.get("hosting_fee") or ZERO,
                power_cost=row.get("power_cost") or ZERO,
                management_fee=row.get("management_fee") or ZERO,
                net=row.get("net") or ZERO,
            )
        )
    final_owners = {str(s.owner_id) for s in statements}
    pending = wanted - final_owners
    if pending:
        # Usage is counted in whole seconds: the running period ends at the last one.
        until = min(now.replace(microsecond=0), period.end)
        found = _preliminary_lines(period=period, owner_ids=pending, until=until)
        awaiting = pools_pending(
            period=period,
            owner_ids=[uuid.UUID(k) for k, _ in found],
            window=Interval(period.start, until),
        )
        for (owner_key, currency), lines in sorted(found.items()):
            out.append(
                Earnings(
                    owner_id=uuid.UUID(owner_key),
                    currency=currency,
                    start=period.start,
                    end=until,
                    period_end=period.end,
                    final=False,
                    statement_id=None,
                    lines=len(lines),
                    gross=_total(line.gross for line in lines),
                    hosting_fee=_total(line.hosting_fee for line in lines),
                    power_cost=_total(line.power_cost for line in lines),
                    management_fee=_total(line.management_fee for line in lines),
                    net=_total(line.net for line in lines),
                    pool_pending=(owner_key, currency) in awaiting,
                )
            )
    return sorted(out, key=lambda e: (str(e.owner_id), e.currency))


def _preliminary_lines(
    *, period: Period, owner_ids: Collection[str], until: datetime
) -> dict[tuple[str, str], list[Line]]:
    """The GPU lines ``statements_compute(period=…, owner_ids=…, until=…)`` would give these
    owners, per (owner id, currency) with at least one line; the same ``ValidationError``
    when it would refuse. Raises nothing for another owner's GPU it need not compute."""
    wanted = set(owner_ids)
    window = Interval(period.start, min(until, period.end))
    period_seconds = int((period.end - period.start).total_seconds())
    with collector_paused():
        prepared = clusters_facts(period, window, clusters_in(window, wanted))
        groups = []
        for p in prepared:
            chosen = p.facts if _whole_cluster(p, window) else _held_by(p, wanted)
            cuts = set().union(*(rate_boundaries(t, window) for t in p.terms.values()))
            groups.append((chosen, {f.gpu_id: cuts for f in chosen}))
        usages = cells_load_many(groups=groups) if groups else []
    found: dict[tuple[str, str], list[Line]] = defaultdict(list)
    for p, (chosen, _), usage in zip(prepared, groups, usages, strict=True):
        for currency in p.currencies:
            inputs = [
                (
                    fact,
                    GpuInputs(
                        key=fact.serial,
                        timeline=usage[fact.gpu_id],
                        ownership=[
                            OwnershipSlice(s.interval, shares)
                            for s in fact.ownership
                            if (
                                shares := {
                                    o: bps
                                    for o, bps in s.shares.items()
                                    if p.currency_of[o] == currency
                                }
                            )
                        ],
                        rentals=[r for c, r in fact.rentals if c == currency],
                    ),
                )
                for fact in chosen
            ]
            pool_amount = p.pools.get(currency) or Decimal("0.00")
            try:
                parts = pool_split(
                    period=window,
                    gpus=[g for _, g in inputs],
                    pool_amount=pool_amount,
                    pool_basis=p.basis,
                )
            except ValueError as exc:  # as the close words it (``computing._cluster_lines``)
                raise ValidationError(
                    {
                        "pool": f"The {currency} {pool_amount} pool of cluster {p.cluster} in "
                        f"{period} cannot be split: no GPU of the cluster has any "
                        f"{'up time' if p.basis == PoolBasis.UP_SECONDS else 'busy GPU-hours'} "
                        "in the period to split it by. Correct or remove the pool entry."
                    }
                ) from exc
            for fact, gpu in inputs:
                if not gpu.ownership:
                    continue
                try:
                    result = gpu_lines(
                        period=window,
                        gpu=gpu,
                        pool_cents=parts[gpu.key],
                        pool_basis=p.basis,
                        rates=p.terms[currency],
                        period_seconds=period_seconds,
                    )
                except ValueError as exc:
                    raise ValidationError(
                        {"rate_card": f"Cluster {p.cluster}, {currency}, GPU {fact.serial}: {exc}."}
                    ) from exc
                for line in result.lines:
                    if line.owner in wanted:
                        found[line.owner, currency].append(line)
    return dict(found)


def _whole_cluster(prepared: ClusterFacts, window: Interval) -> bool:
    """Whether every GPU of the cluster bears on these owners' lines: a pool is entered (its
    split weighs them all), or some time of the window has no rate card in a currency (a GPU
    in service then makes the close refuse the period)."""
    if any(prepared.pools.get(c) for c in prepared.currencies):
        return True
    return any(
        subtract([window], [t.interval for t in prepared.terms[c]]) for c in prepared.currencies
    )


def _held_by(prepared: ClusterFacts, owners: set[str]) -> list[GpuFacts]:
    return [f for f in prepared.facts if owners & set(f.owner_ids())]


def pools_pending(
    *, period: Period, owner_ids: Collection[uuid.UUID], window: Interval
) -> set[tuple[str, str]]:
    """(owner id, currency) of each owner with a GPU placed, while the owner held it within
    ``window``, in a cluster that has no pool revenue entered for the period in the owner's
    billing currency (an unsaved period has none)."""
    if not owner_ids:
        return set()
    overlaps = Q(valid_from__lt=window.end) & (
        Q(valid_to__isnull=True) | Q(valid_to__gt=window.start)
    )
    held: dict[uuid.UUID, list[tuple[uuid.UUID, Interval]]] = {}
    for owner_id, gpu_id, valid_from, valid_to in (
        Ownership.objects.filter(overlaps, owner_id__in=list(owner_ids))
        .values_list("owner_id", "gpu_id", "valid_from", "valid_to")
        .order_by()
    ):
        held.setdefault(gpu_id, []).append((owner_id, _span(valid_from, valid_to, window)))
    placed = (
        Placement.objects.filter(overlaps, gpu_id__in=list(held))
        .values_list("gpu_id", "node__cluster_id", "valid_from", "valid_to")
        .order_by()
    )
    currency = dict(
        Owner.objects.filter(pk__in=list(owner_ids)).values_list("pk", "billing_currency")
    )
    entered = (
        set(PoolRevenue.objects.filter(period_id=period.pk).values_list("cluster_id", "currency"))
        if period.pk is not None
        else set()
    )
    out: set[tuple[str, str]] = set()
    for gpu_id, cluster_id, valid_from, valid_to in placed:
        there = _span(valid_from, valid_to, window)
        for owner_id, owned in held[gpu_id]:
            if intersect([there], [owned]) and (cluster_id, currency[owner_id]) not in entered:
                out.add((str(owner_id), currency[owner_id]))
    return out


def _span(start: datetime, end: datetime | None, window: Interval) -> Interval:
    return Interval(max(start, window.start), min(end or window.end, window.end))


@dataclass(frozen=True)
class DayMoney:
    """A published statement's GPU lines over one UTC day of its period (``statement_days``)."""

    day: datetime
    gross: Decimal
    hosting_fee: Decimal
    power_cost: Decimal
    management_fee: Decimal

    @property
    def costs(self) -> Decimal:
        return self.hosting_fee + self.power_cost + self.management_fee

    @property
    def net(self) -> Decimal:
        return self.gross - self.costs


def statement_days(*, statement: Statement) -> list[DayMoney] | None:
    """Per UTC day of the statement's period, the gross, each fee and the net of its GPU
    lines; they add up to the statement's own sums to the cent. None when its frozen inputs
    cannot say: computed before cells were frozen, or before they were cut at midnight.

    Derived from the statement's frozen inputs by the statements' own engine: each GPU's lines
    are computed over the whole period (so its pool part, rentals and the hosting fee's
    pro-rating are the period's) with the owner's holding cut at every UTC midnight, each day
    a run of its own; the owner's line of a day is that day's figures. Each is rounded to the
    cent, so the days can miss the statement's sums by a few cents: each sum is then split
    over the days by the largest-remainder method (accounting rule 7), weighted by those
    figures.
    """
    frozen: dict[str, Any] = statement.frozen_inputs or {}
    entries = frozen.get("gpus") or []
    if any(not entry.get("cells") for entry in entries):
        return None
    owner = str(statement.owner_id)
    period = Interval(statement.period.start, statement.period.end)
    days = _days_of(period)
    names = ("gross", *COSTS_INCLUDED)
    found = {d.start: dict.fromkeys(names, ZERO) for d in days}
    # The owner's holding cut at every midnight, each day under a key of its own, so that no
    # two days merge into one run: one line per day (and share) the owner held a GPU.
    keys = {f"{owner}@{n}": d.start for n, d in enumerate(days)}
    for entry in entries:
        gpu = gpu_inputs_from_frozen(entry)
        if not any(owner in part.shares for part in gpu.ownership):
            continue
        held = [
            OwnershipSlice(
                piece,
                {
                    **{o: bps for o, bps in part.shares.items() if o != owner},
                    f"{owner}@{n}": part.shares[owner],
                },
            )
            for part in gpu.ownership
            if owner in part.shares
            for n, day in enumerate(days)
            for piece in intersect([part.interval], [day])
            if piece.seconds
        ] + [part for part in gpu.ownership if owner not in part.shares]
        try:
            lines = gpu_lines(
                period=period,
                gpu=replace(gpu, ownership=held),
                pool_cents=Decimal(entry["pool_cents"]),
                pool_basis=PoolBasis(entry["pool_basis"]),
                rates=rates_from_frozen(entry),
            ).lines
        except ValueError:
            return None  # cells not cut at midnight (computed before they were)
        for line in lines:
            if line.owner in keys:
                for name in names:
                    found[keys[line.owner]][name] += getattr(line, name)
    sums = statement_gpu_sums(statements=[statement]).get(statement.pk, {})
    split: dict[str, dict[datetime, Decimal]] = {}
    for name in names:
        total = sums.get(name) or ZERO
        weights = [(d.start, found[d.start][name]) for d in days]
        if total and not any(weight for _, weight in weights):
            return None  # nothing to weigh the sum by (not seen: a sum comes from these days)
        split[name] = split_largest_remainder(total, weights)
    return [
        DayMoney(
            day=d.start,
            gross=split["gross"][d.start],
            hosting_fee=split["hosting_fee"][d.start],
            power_cost=split["power_cost"][d.start],
            management_fee=split["management_fee"][d.start],
        )
        for d in days
    ]


def _days_of(period: Interval) -> list[Interval]:
    days = []
    day = period.start
    while day < period.end:
        days.append(Interval(day, min(day + DAY, period.end)))
        day += DAY
    return days


# A published statement's days never change (its frozen inputs are immutable in the
# database), so they are kept by the statement and its content hash; "v1" is the derivation's
# version. Working them out reruns every GPU's lines (~1.5 s for 100 GPUs over a month).
_DAYS_KEY = "billing:statement-days:v1:{pk}:{sha}"
_DAYS_KEPT_S = 30 * 86_400


def statement_days_kept(*, statement: Statement) -> list[DayMoney] | None:
    """``statement_days``, worked out once per published statement and kept (Redis)."""
    if statement.status != Statement.Status.PUBLISHED:
        return statement_days(statement=statement)
    key = _DAYS_KEY.format(pk=statement.pk, sha=statement.content_sha256)
    kept = cache.get(key)
    if kept is None:
        kept = (statement_days(statement=statement),)
        cache.set(key, kept, timeout=_DAYS_KEPT_S)
    days: list[DayMoney] | None = kept[0]
    return days

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
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from accounts.models import Disclosure, Owner
from billing.engine.intervals import Interval, intersect
from billing.models import Period, PoolRevenue, Statement, StatementLine
from billing.services.computing import statements_compute
from fleet.models import Ownership, Placement

ZERO = Decimal("0.00")
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


def _sum(lines: Sequence[dict[str, Any]], name: str) -> Decimal:
    return sum((Decimal(line[name]) for line in lines), ZERO)


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
    sums: dict[uuid.UUID, dict[str, Any]] = {
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
        drafts = statements_compute(
            period=period, disclosure=disclosure, owner_ids=pending, until=until
        )
        awaiting = pools_pending(
            period=period,
            owner_ids=[uuid.UUID(k) for k, _ in drafts],
            window=Interval(period.start, until),
        )
        for (owner_key, currency), draft in sorted(drafts.items()):
            if not draft.gpu_lines:
                continue
            lines = draft.gpu_lines
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
                    gross=_sum(lines, "gross"),
                    hosting_fee=_sum(lines, "hosting_fee"),
                    power_cost=_sum(lines, "power_cost"),
                    management_fee=_sum(lines, "management_fee"),
                    net=_sum(lines, "net"),
                    pool_pending=(owner_key, currency) in awaiting,
                )
            )
    return sorted(out, key=lambda e: (str(e.owner_id), e.currency))


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

"""An owner's earnings for a period, final or preliminary, as the statements reckon them.

Final: the period's published statement — the sums of its GPU lines, as stored.
Preliminary: anything else (the running month so far, an open or closing period, a draft
not yet published) — computed now by the statements' own code
(``billing.services.computing.statements_compute``) for these owners only, up to now,
writing nothing. There is no second formula: a preliminary figure for a whole period equals
the draft statement the close would write from the same data.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum

from accounts.models import Disclosure
from billing.models import Period, Statement, StatementLine
from billing.services.computing import statements_compute

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

    @property
    def to_date(self) -> bool:
        return self.end < self.period_end


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
                )
            )
    return sorted(out, key=lambda e: (str(e.owner_id), e.currency))

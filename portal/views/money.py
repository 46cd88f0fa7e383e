"""Earnings on the fleet overview, and the payouts and balance page.

Every figure here comes from billing: preliminary earnings from
``billing.selectors.earnings.owner_earnings`` (the statements' own code, run up to now,
writing nothing), final ones from published statements, balances from
``billing.services.ledger.balance_available``. Nothing is computed a second way here.
Each amount is shown inside an element marked ``data-basis`` that points to the paragraph
stating its basis (``portal.wording.earnings_basis_check``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse

from accounts.models import Owner, User
from accounts.selectors import disclosure_current
from billing.models import Payout, Statement
from billing.selectors.earnings import Earnings, owner_earnings
from billing.services.ledger import balance_available
from portal.access import owners_of_user, payouts_for_user, statements_for_user
from portal.selectors import Period
from portal.tables import (
    Column,
    Table,
    csv_response,
    export_of,
    fmt_money,
    fmt_when,
    with_export_links,
)
from portal.views.common import earnings_view, now, the_user

NOT_GUARANTEED = (
    "Results are not guaranteed: they depend on utilization, uptime, demand, costs, hardware "
    "performance and market conditions, and can be zero."
)
GROSS_NET = (
    "Gross is your share of the revenue your GPUs earned (rentals and pool), before costs; "
    "net is gross minus the hosting fee, power cost and management fee."
)


def statement_url(statement_id: uuid.UUID) -> str:
    """The statement's portal page (``portal:statement``)."""
    return reverse("portal:statement", args=[statement_id])


# ---- the overview's earnings -----------------------------------------------------------------


@dataclass(frozen=True)
class EarningsBlock:
    key: str  # unique on the page: the prefix of the block's element ids
    owner: Owner
    period: Period
    earnings: Earnings | None  # None: no GPU line for this account in the period

    @property
    def final(self) -> bool:
        return self.earnings is not None and self.earnings.final

    @property
    def status(self) -> str:
        return "Final" if self.final else "Preliminary"

    @property
    def cards(self) -> list[tuple[str, str, str]]:
        e = self.earnings
        if e is None:
            return []
        so_far = "" if self.final else " so far"
        cards = [
            (
                f"Gross{so_far}",
                fmt_money(e.gross, e.currency),
                "your share of revenue, before costs"
                if e.revenue_complete
                else "your share of rentals (rate × up time so far) and of pools entered",
            ),
        ]
        if not e.revenue_complete:
            cards.append(
                ("Pool revenue", "not yet known", "entered by the operator for the period")
            )
        cards += [
            (
                f"Hosting fee{so_far}",
                fmt_money(e.hosting_fee, e.currency),
                "in-service time × share",
            ),
            (f"Power cost{so_far}", fmt_money(e.power_cost, e.currency), "energy × PUE × price"),
            (
                f"Management fee{so_far}",
                fmt_money(e.management_fee, e.currency),
                "a percentage of gross",
            ),
        ]
        if e.net_shown is None:
            cards.append(("Net", "not shown yet", "revenue is incomplete; costs are listed above"))
        else:
            cards.append(("Net", fmt_money(e.net_shown, e.currency), "gross − the three costs"))
        return cards

    @property
    def basis(self) -> str:
        e, period = self.earnings, self.period
        end = e.end if e is not None else period.end
        span = f"{period.label}, from {fmt_when(period.start)} to {fmt_when(end)}"
        if end < period.month_end:
            span += " (month to date)"
        if self.final:
            status = "Final: the figures of the published statement."
        else:
            status = (
                "Preliminary: computed now, by the rules statements follow, from the data "
                "received so far; it changes as data arrives and until the period's statement "
                "is published."
            )
        if e is not None and not e.revenue_complete:
            status += (
                " Revenue is incomplete: gross so far counts rentals (rate × up seconds so "
                "far, times your share) and any pool revenue already entered; a pool not "
                "entered yet is not known and counts as nothing here. So no net is shown: the "
                "hosting fee, power cost and management fee so far are costs, listed as such."
            )
        return f"{status} Period: {span}. {GROSS_NET} {NOT_GUARANTEED}"

    @property
    def statement_url(self) -> str | None:
        if self.earnings is None or self.earnings.statement_id is None:
            return None
        return statement_url(self.earnings.statement_id)


def earnings_blocks(
    *, owners: list[Owner], periods: list[Period], at: datetime
) -> list[tuple[Period, list[EarningsBlock] | None]]:
    """Per period, one block per owner account and currency (one for an account without a
    GPU line in it), or None when the period's figures cannot be worked out yet. Only for a
    user who acknowledged the current disclosure."""
    disclosure = disclosure_current()
    if disclosure is None:
        raise RuntimeError("earnings are shown only after the disclosure")
    out: list[tuple[Period, list[EarningsBlock] | None]] = []
    for index, period in enumerate(periods):
        try:
            found = owner_earnings(
                owner_ids=[o.pk for o in owners],
                start=period.start,
                end=period.month_end,
                now=at,
                disclosure=disclosure,
            )
        except ValidationError:
            # The operator's billing data for the period is incomplete (no rate card, revenue
            # in a currency a co-owner is not billed in). The reason may name other owners:
            # the page says only that there is no figure yet.
            out.append((period, None))
            continue
        blocks = []
        for owner in owners:
            mine: list[Earnings | None] = [e for e in found if e.owner_id == owner.pk]
            for n, earnings in enumerate(mine or [None]):
                key = f"earn-{index}-{owner.pk.hex[:8]}-{n}"
                blocks.append(EarningsBlock(key, owner, period, earnings))
        out.append((period, blocks))
    return out


def overview_periods(*, running: Period, selected: Period) -> list[Period]:
    """The running month, and the month chosen on the page when it is another."""
    return [running] if selected.key == running.key else [running, selected]


# ---- payouts and balance ---------------------------------------------------------------------


@dataclass(frozen=True)
class Balance:
    owner: Owner
    currency: str
    last: Statement | None  # the last published statement
    available: Decimal  # billing's balance_available

    @property
    def paid_since(self) -> Decimal:
        return (self.last.closing_balance if self.last else Decimal("0.00")) - self.available


def balances_for(
    *, user: User, statements: list[Statement], payouts: list[Payout]
) -> list[Balance]:
    owners = {o.pk: o for o in owners_of_user(user=user)}
    last: dict[tuple[uuid.UUID, str], Statement] = {}
    for statement in sorted(statements, key=lambda s: s.period.start):
        last[statement.owner_id, statement.currency] = statement
    keys = set(last) | {(p.owner_id, p.currency) for p in payouts}
    rows = [
        Balance(
            owner=owners[owner_id],
            currency=currency,
            last=last.get((owner_id, currency)),
            available=balance_available(owner=owners[owner_id], currency=currency),
        )
        for owner_id, currency in keys
    ]
    return sorted(rows, key=lambda b: (b.owner.legal_name, b.currency))


def _period_label(statement: Statement) -> str:
    return f"{statement.period.start:%B %Y}"


def _money(name: str, label: str, amount: Any, *, link: Any = None, csv: str = "") -> Column:
    return Column(
        label,
        lambda r: getattr(r, amount),
        text=lambda r: fmt_money(getattr(r, amount), r.currency),
        numeric=True,
        link=link,
        csv_label=csv or name,
    )


BASIS_ID = "payouts-basis"


def payout_tables(
    *, balances: list[Balance], statements: list[Statement], payouts: list[Payout]
) -> list[Table]:
    return [
        Table(
            name="balances",
            caption="Balance by owner account and currency",
            columns=[
                Column("Owner account", lambda b: b.owner.legal_name),
                Column("Currency", lambda b: b.currency),
                Column(
                    "Last published statement",
                    lambda b: _period_label(b.last) if b.last else None,
                    text=lambda b: _period_label(b.last) if b.last else "none yet",
                    link=lambda b: statement_url(b.last.pk) if b.last else None,
                ),
                Column(
                    "Its closing balance",
                    lambda b: b.last.closing_balance if b.last else None,
                    text=lambda b: fmt_money(b.last.closing_balance, b.currency) if b.last else "—",
                    numeric=True,
                    csv_label="closing_balance",
                ),
                _money("paid_since", "Paid out since", "paid_since"),
                _money("balance", "Balance", "available"),
                Column("Status", lambda b: "final", text=lambda b: "Final"),
            ],
            rows=balances,
            empty="No statement has been published for your accounts yet.",
            basis_id=BASIS_ID,
        ),
        Table(
            name="payouts",
            caption="Payouts",
            columns=[
                Column("Paid on", lambda p: p.paid_on, text=lambda p: f"{p.paid_on:%Y-%m-%d}"),
                Column("Owner account", lambda p: p.owner.legal_name),
                _money("amount", "Amount", "amount"),
                Column("Currency", lambda p: p.currency),
                Column("Reference", lambda p: p.reference),
            ],
            rows=payouts,
            empty="No payouts yet.",
            basis_id=BASIS_ID,
        ),
        Table(
            name="statements",
            caption="Published statements that make up the balance",
            columns=[
                Column(
                    "Period",
                    lambda s: f"{s.period.start:%Y-%m}",
                    text=_period_label,
                    link=lambda s: statement_url(s.pk),
                ),
                Column("Owner account", lambda s: s.owner.legal_name),
                Column("Currency", lambda s: s.currency),
                _money("opening_balance", "Opening balance", "opening_balance"),
                _money("lines_total", "Net of GPU lines", "lines_total"),
                _money("adjustments_total", "Adjustments", "adjustments_total"),
                _money("payouts_total", "Paid out in it", "payouts_total"),
                _money("closing_balance", "Closing balance", "closing_balance"),
                Column(
                    "Published",
                    lambda s: s.published_at,
                    text=lambda s: f"{s.published_at:%Y-%m-%d}" if s.published_at else "—",
                ),
            ],
            rows=statements,
            empty="No statement has been published for your accounts yet.",
            basis_id=BASIS_ID,
        ),
    ]


def payouts_basis(*, statements: list[Statement], at: datetime) -> str:
    periods = sorted({_period_label(s) for s in statements}, key=lambda p: p[-4:] + p)
    through = f" (periods {', '.join(periods)})" if periods else ""
    return (
        f"Final figures only, as of {fmt_when(at)}: from published statements{through} and "
        "recorded payouts. A statement's closing balance is its opening balance (the previous "
        "closing balance, carried forward even when negative), plus the net of its GPU lines "
        "and its adjustments, less the payouts dated in its period; the balance is the last "
        f"closing balance less the payouts recorded since. {GROSS_NET} Preliminary earnings "
        f"of periods not yet published are on the overview and are not in the balance. "
        f"{NOT_GUARANTEED}"
    )


@earnings_view
def payouts(request: HttpRequest) -> HttpResponseBase:
    user, at = the_user(request), now()
    statements = list(
        statements_for_user(user=user)
        .select_related("owner", "period")
        .order_by("-period__start", "owner__legal_name", "currency")
    )
    paid = list(
        payouts_for_user(user=user).select_related("owner").order_by("-paid_on", "reference")
    )
    balances = balances_for(user=user, statements=statements, payouts=paid)
    tables = payout_tables(balances=balances, statements=statements, payouts=paid)
    context = {
        "basis_id": BASIS_ID,
        "basis": payouts_basis(statements=statements, at=at),
        "owners": list(owners_of_user(user=user)),
    }
    wanted = export_of(request, tables)
    if wanted is not None:
        return csv_response(wanted, stamp=at)
    with_export_links(request, tables)
    return render(
        request, "portal/payouts.html", {**context, "tables": {t.name: t for t in tables}}
    )

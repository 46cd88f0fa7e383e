"""What a period's statements carry besides their lines: adjustments, payouts, the balance
each opens with, and the owners' names — read in one round trip (a redraft of one owner makes
~25 queries in all; these four were ORM queries of their own)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from accounts.models import Owner
from billing.models import Adjustment, Payout, Period, Statement

_ADJUSTMENTS = f"""
SELECT id, owner_id, currency, amount, reason, source, corrects_statement_id, corrects_line_id
  FROM {Adjustment._meta.db_table}
 WHERE period_id = %(period)s {{mine}}
 ORDER BY created_at, id
"""  # noqa: S608 - table names from the models
_PAYOUTS = f"""
SELECT owner_id, currency, reference, amount, paid_on
  FROM {Payout._meta.db_table}
 WHERE paid_on >= %(paid_from)s AND paid_on < %(paid_to)s {{mine}}
 ORDER BY paid_on, reference
"""  # noqa: S608
# The latest published statement of each owner and currency from an earlier period.
_OPENINGS = f"""
SELECT DISTINCT ON (s.owner_id, s.currency) s.owner_id, s.currency, s.closing_balance, s.id
  FROM {Statement._meta.db_table} s JOIN {Period._meta.db_table} p ON p.id = s.period_id
 WHERE s.status = 'published' AND p.start < %(start)s {{mine}}
 ORDER BY s.owner_id, s.currency, p.start DESC
"""  # noqa: S608
_NAMES = f"SELECT id, legal_name FROM {Owner._meta.db_table} WHERE id = ANY(%(names)s::uuid[])"  # noqa: S608
_MINE = "AND owner_id = ANY(%(owners)s::uuid[])"


@dataclass
class LedgerRows:
    """Rows as read: adjustments (id, owner, currency, amount, reason, source, statement and
    line corrected) in the order made; payouts (owner, currency, reference, amount, paid on)
    by date and reference; openings (owner, currency) → (closing balance, statement id);
    names: owner → legal name, for the owners asked about."""

    adjustments: list[tuple[Any, ...]]
    payouts: list[tuple[Any, ...]]
    openings: dict[tuple[str, str], tuple[Decimal, str]]
    names: dict[uuid.UUID, str]


def ledger_rows(
    *,
    period_id: int | None,
    start: datetime,
    paid_from: date,
    paid_to: date,
    owner_ids: Collection[str] | None,
    names_of: Collection[str] = (),
) -> LedgerRows:
    """A period's adjustments, the payouts made in ``[paid_from, paid_to)``, and each owner's
    opening balance (the latest published statement of a period starting before ``start``),
    of every owner or of ``owner_ids``; with the legal names of ``names_of``."""
    mine = "" if owner_ids is None else _MINE
    statements = [
        _ADJUSTMENTS.format(mine=mine),
        _PAYOUTS.format(mine=mine),
        _OPENINGS.format(mine=mine.replace("owner_id", "s.owner_id")),
    ]
    if names_of:
        statements.append(_NAMES)
    params = {
        "period": period_id,
        "start": start,
        "paid_from": paid_from,
        "paid_to": paid_to,
        "owners": sorted(owner_ids or ()),
        "names": sorted(names_of),
    }
    with connection.cursor() as cursor:
        cursor.execute(";\n".join(statements), params)
        results = [list(cursor.fetchall())]
        while cursor.nextset():
            results.append(list(cursor.fetchall()))
    adjustments, payouts, openings = results[:3]
    return LedgerRows(
        adjustments=adjustments,
        payouts=payouts,
        openings={
            (str(owner), currency): (balance, str(statement))
            for owner, currency, balance, statement in openings
        },
        names=dict(results[3]) if names_of else {},
    )

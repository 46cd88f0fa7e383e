"""Reconciling a closed period: late telemetry and fixes never edit it.

The period is recomputed from today's data and compared, line by line (owner, currency, GPU,
run, and which of the statement's lines with those four it is: a GPU that changed cluster in
the period has a line per cluster over the same run, in cluster order), with its published
statements. Each difference in a line's net — less what earlier
reconciliations already adjusted for that line — becomes an ``Adjustment`` in the next open
period, naming the statement and line it corrects, with an idempotency key; running again
with nothing new adds nothing.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from accounts import selectors as accounts_selectors
from accounts.models import User
from billing.models import Adjustment, Period, Statement, StatementLine
from billing.services.audit import billing_audit
from billing.services.closing import refuse_pending_telemetry
from billing.services.computing import statements_compute
from billing.services.periods import period_for_month
from core.instants import iso_z
from core.locks import lock_one

# owner, currency, gpu, starts_at, ends_at, and the line's rank among the statement's lines
# with those five (0 but for a GPU that changed cluster: its lines repeat the same run).
LineKey = tuple[str, str, str, str, str, int]


@dataclass(frozen=True)
class Reconciliation:
    into: Period
    added: list[Adjustment]


def _next_open_period(after: Period) -> Period:
    following = (
        Period.objects.filter(start__gte=after.end, status=Period.Status.OPEN)
        .order_by("start")
        .first()
    )
    if following is not None:
        return following
    latest = Period.objects.order_by("-end").first()
    if latest is None:
        raise RuntimeError("a closed period exists, so some period does")
    end = latest.end.astimezone(UTC)
    created = period_for_month(year=end.year, month=end.month)
    if created.status != Period.Status.OPEN:  # pragma: no cover - latest period ends there
        raise ValidationError({"period": "No open period to put the adjustments in."})
    return created


def _keyed(owner: str, currency: str, wheres: list[tuple[str, str, str]]) -> list[LineKey]:
    """The key of each of one statement's lines, given as (GPU, start, end) in its order."""
    seen: dict[tuple[str, str, str], int] = defaultdict(int)
    keys = []
    for where in wheres:
        keys.append((owner, currency, *where, seen[where]))
        seen[where] += 1
    return keys


def _new_line_stem(period: Period, key: LineKey) -> str:
    """The key stem of a line no published statement had (a late sale or transfer inside the
    period). Spelled out, the line's key (two UUIDs, two instants) runs past the idempotency
    key's length, so it is named by its SHA-256: fixed-length and deterministic, so a rerun
    finds what it recorded. No spelled-out key was ever stored (each such run failed whole),
    so nothing recorded before goes unrecognised."""
    digest = hashlib.sha256("\x1f".join(map(str, key)).encode()).hexdigest()
    return f"reconcile:{period.pk}:new:{digest}"  # ~82 characters of the key's 100


def period_reconcile(*, period: Period, by: User, reason: str = "") -> Reconciliation:
    """Adjusts the next open period for what changed in closed ``period`` since it was
    published; one audit entry (``billing.period.reconcile``, about ``period``) when it adds
    any adjustment."""
    period.refresh_from_db()
    if period.status != Period.Status.CLOSED:
        raise ValidationError(
            {"period": f"Only a closed period is reconciled; {period} is {period.status}."}
        )
    refuse_pending_telemetry(period, "reconcile")
    disclosure = accounts_selectors.disclosure_current()
    if disclosure is None:
        raise RuntimeError("a closed period was issued under a disclosure, so one is published")
    now = statements_compute(period=period, disclosure=disclosure)

    published = {
        (str(s.owner_id), s.currency): s
        for s in Statement.objects.filter(period=period, status=Statement.Status.PUBLISHED)
    }
    old_lines: dict[LineKey, tuple[Statement, StatementLine, Decimal]] = {}
    for issued in published.values():
        rows = list(issued.lines.filter(kind=StatementLine.Kind.GPU).order_by("position"))
        wheres = [_where(r) for r in rows]
        for key, row in zip(
            _keyed(str(issued.owner_id), issued.currency, wheres), rows, strict=True
        ):
            old_lines[key] = (issued, row, row.net)
    new_lines: dict[LineKey, tuple[dict[str, Any], Decimal]] = {}
    for (owner, currency), draft in now.items():
        computed_lines = draft.content["lines"]
        wheres = [(d["gpu_id"], d["starts_at"], d["ends_at"]) for d in computed_lines]
        for key, computed in zip(_keyed(owner, currency, wheres), computed_lines, strict=True):
            new_lines[key] = (computed, Decimal(computed["net"]))

    already: dict[Any, Decimal] = defaultdict(lambda: Decimal("0.00"))
    counts: dict[str, int] = defaultdict(int)
    prior = Adjustment.objects.filter(
        source=Adjustment.Source.RECONCILIATION,
        idempotency_key__startswith=f"reconcile:{period.pk}:",
    )
    for recorded, amount in prior.values_list("idempotency_key", "amount"):
        stem = (recorded or "").rsplit(":", 1)[0]
        already[stem] += amount
        counts[stem] += 1

    into = _next_open_period(period)
    plans: list[dict[str, Any]] = []
    for key in sorted(set(old_lines) | set(new_lines)):
        owner, currency, gpu_id, starts_at, ends_at, _ = key
        old = old_lines.get(key)
        statement: Statement | None = old[0] if old else None
        line: StatementLine | None = old[1] if old else None
        old_net = old[2] if old else Decimal("0.00")
        new = new_lines.get(key)
        doc: dict[str, Any] = new[0] if new else {}
        new_net = new[1] if new else Decimal("0.00")
        if statement is None:
            statement = published.get((owner, currency))
        stem = (
            f"reconcile:{period.pk}:line:{line.pk}"
            if line is not None
            else _new_line_stem(period, key)
        )
        difference = new_net - old_net - already[stem]
        if difference == 0:
            continue
        serial = doc.get("serial") or (line.description if line else gpu_id)
        plans.append(
            {
                "owner_id": owner,
                "currency": currency,
                "amount": difference,
                "reason": (
                    f"Reconciliation of {period}: {serial} {starts_at[:19]}–{ends_at[:19]} net "
                    f"{old_net + already[stem]} → {new_net} (late telemetry or a correction)."
                ),
                "statement": statement,
                "line": line,
                "key": f"{stem}:{counts[stem] + 1}",
            }
        )
    added: list[Adjustment] = []
    with transaction.atomic():
        locked = lock_one(Period.objects.filter(pk=into.pk))
        if locked.status != Period.Status.OPEN:
            raise ValidationError({"period": f"Period {locked} stopped being open; run again."})
        for plan in plans:
            try:
                with transaction.atomic():
                    added.append(
                        Adjustment.objects.create(
                            owner_id=plan["owner_id"],
                            period=locked,
                            currency=plan["currency"],
                            amount=plan["amount"],
                            reason=plan["reason"],
                            source=Adjustment.Source.RECONCILIATION,
                            corrects_statement=plan["statement"],
                            corrects_line=plan["line"],
                            idempotency_key=plan["key"],
                            created_by=by,
                        )
                    )
            except IntegrityError:
                continue  # a concurrent run recorded this very adjustment
        if added:
            billing_audit(
                period,
                action="billing.period.reconcile",
                by=by,
                reason=reason,
                after={
                    "into_period_id": locked.pk,
                    "adjustments": [a.pk for a in added],
                    "total": sum((a.amount for a in added), Decimal("0.00")),
                },
            )
    return Reconciliation(into=into, added=added)


def _where(line: StatementLine) -> tuple[str, str, str]:
    """A GPU line's GPU and span, as its key in the statement's document."""
    if line.starts_at is None or line.ends_at is None:
        raise RuntimeError(f"GPU line {line.pk} has no span")
    return str(line.gpu_id), iso_z(line.starts_at), iso_z(line.ends_at)

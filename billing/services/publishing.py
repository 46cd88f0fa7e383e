"""Publishing takes two operators: one requests, another approves (never the same person).

Both steps are compare-and-set updates on the statement's status and hash, so publishing
twice, or two approvals racing, publish exactly once; the database check
``billing_statement_published_by_a_second_operator`` refuses self-approval whatever the path.
Approval refuses a draft computed under a disclosure that is no longer current (each
statement records the version it is issued under). Before approving, the statement is
recomputed from its frozen inputs and must reproduce its hash, and the stored totals and
lines must be that content's (a draft is writable until then: a raw edit of its figures
would otherwise be published under a hash that does not cover them). Approval writes the
``statement.published`` webhook event in the same transaction.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Field
from django.utils import timezone

from accounts import selectors as accounts_selectors
from accounts.models import Disclosure, User
from billing.engine.document import BASIS, document_from_frozen, sha256_hex
from billing.models import Period, Statement, StatementLine
from billing.models.statements import LINE_FIELDS
from billing.services.audit import billing_audit
from billing.services.closing import line_rows, refuse_pending_telemetry
from core.locks import lock_one
from webhooks.models import EventType
from webhooks.outbox import Event, events_emit

# The same sentence the partner API puts in every statement's basis.
NOT_GUARANTEED = (
    "Results are not guaranteed: they depend on utilization, uptime, demand, costs, hardware "
    "performance and market conditions, and can be zero."
)


def _operator(user: User, action: str) -> None:
    if not user.is_staff:
        raise ValidationError({"by": f"Only operators may {action} a statement."})


_TOTALS = (
    "opening_balance",
    "lines_total",
    "adjustments_total",
    "payouts_total",
    "closing_balance",
)


def statement_reproduces(*, statement: Statement) -> bool:
    """Recomputing from the frozen inputs gives the stored hash, and the stored totals and
    lines are exactly that content's."""
    content = document_from_frozen(statement.frozen_inputs)
    if sha256_hex(content) != statement.content_sha256:
        return False
    if any(getattr(statement, name) != Decimal(content[name]) for name in _TOTALS):
        return False
    fields = [f for n in LINE_FIELDS if isinstance(f := StatementLine._meta.get_field(n), Field)]
    if len(fields) != len(LINE_FIELDS):  # the line's own columns, no relation's reverse
        raise RuntimeError("LINE_FIELDS names a field that is not a column of StatementLine")
    expected = [
        tuple(
            None if value is None else field.to_python(value)
            for field, value in zip(fields, row[1:], strict=True)
        )
        for row in line_rows(statement.pk, content)
    ]
    stored = list(statement.lines.order_by("position").values_list(*LINE_FIELDS))
    return stored == expected


def _refuse_superseded_disclosure(statement: Statement) -> None:
    """A statement is issued under the disclosure current when it is published: its draft
    took the version in force when it was computed, and a newer one may have come since."""
    disclosure = accounts_selectors.disclosure_current()
    issued_under = (statement.disclosure_version, statement.disclosure_sha256)
    if disclosure is None or (disclosure.version, disclosure.text_sha256) != issued_under:
        now = f"version {disclosure.version} is" if disclosure is not None else "none is"
        raise ValidationError(
            {
                "statement": f"This draft was computed under disclosure version "
                f"{statement.disclosure_version}, but {now} current now; recompute the "
                "drafts of the period, then request publishing again."
            }
        )


@transaction.atomic
def statement_publish_request(*, statement: Statement, by: User, reason: str = "") -> Statement:
    _operator(by, "request publishing of")
    period = lock_one(Period.objects.filter(pk=statement.period_id))
    if period.status != Period.Status.CLOSING:
        raise ValidationError(
            {
                "statement": f"Statements are published while their period closes; {period} is "
                f"{period.status}."
            }
        )
    refuse_pending_telemetry(period, "publish statements for")
    updated = Statement.objects.filter(pk=statement.pk, status=Statement.Status.DRAFT).update(
        status=Statement.Status.PUBLISH_REQUESTED, requested_by=by, requested_at=timezone.now()
    )
    if updated != 1:
        current = Statement.objects.get(pk=statement.pk)
        raise ValidationError(
            {"statement": f"This statement is {current.get_status_display().lower()}, not a draft."}
        )
    requested = Statement.objects.select_related("owner", "period").get(pk=statement.pk)
    billing_audit(
        requested,
        action="billing.statement.publish_request",
        by=by,
        reason=reason,
        before={"status": Statement.Status.DRAFT.value},
        after={"status": requested.status, "content_sha256": requested.content_sha256},
    )
    return requested


@transaction.atomic
def statement_publish_approve(*, statement: Statement, by: User, reason: str = "") -> Statement:
    _operator(by, "approve")
    current = Statement.objects.get(pk=statement.pk)
    if current.status == Statement.Status.PUBLISHED:
        raise ValidationError({"statement": "This statement is already published."})
    if current.status != Statement.Status.PUBLISH_REQUESTED:
        raise ValidationError({"statement": "Publishing this statement was not requested."})
    if current.requested_by_id == by.pk:
        raise ValidationError(
            {"by": "You requested publishing this statement; another operator must approve it."}
        )
    period = Period.objects.get(pk=current.period_id)
    refuse_pending_telemetry(period, "publish statements for")
    _refuse_superseded_disclosure(current)
    if not statement_reproduces(statement=current):
        raise ValidationError(
            {
                "statement": "Recomputing from the frozen inputs does not give the stored hash "
                "and figures; recompute the drafts before publishing."
            }
        )
    # Compare-and-set on status and hash: a recomputed draft, a second approval or a racing
    # one finds nothing to update.
    updated = Statement.objects.filter(
        pk=current.pk,
        status=Statement.Status.PUBLISH_REQUESTED,
        requested_by=current.requested_by_id,
        content_sha256=current.content_sha256,
    ).update(status=Statement.Status.PUBLISHED, approved_by=by, published_at=timezone.now())
    if updated != 1:
        raise ValidationError(
            {
                "statement": "The statement changed while you approved it (published by someone "
                "else, or recomputed); look again."
            }
        )
    published = Statement.objects.select_related("owner", "period").get(pk=current.pk)
    events_emit(events=[statement_published_event(published)])
    billing_audit(
        published,
        action="billing.statement.publish_approve",
        by=by,
        reason=reason,
        before={
            "status": Statement.Status.PUBLISH_REQUESTED.value,
            "requested_by_id": current.requested_by_id,
        },
        after={"status": published.status, "content_sha256": published.content_sha256},
    )
    return published


def statement_published_event(statement: Statement) -> Event:
    """The webhook event of a published statement: its totals with their basis and the
    disclosure it was issued under, as the partner API serves them (no lines)."""
    disclosure = Disclosure.objects.filter(version=statement.disclosure_version).first()
    data: dict[str, Any] = {
        "statement": {
            "id": statement.pk,
            "owner_id": statement.owner_id,
            "currency": statement.currency,
            "status": statement.status,
            "opening_balance": statement.opening_balance,
            "lines_total": statement.lines_total,
            "adjustments_total": statement.adjustments_total,
            "payouts_total": statement.payouts_total,
            "closing_balance": statement.closing_balance,
            "content_sha256": statement.content_sha256,
            "published_at": statement.published_at,
            "basis": {
                "period": {"start": statement.period.start, "end": statement.period.end},
                "finality": "final",
                "gross": BASIS["gross"],
                "net": BASIS["net"],
                "costs_included": BASIS["costs_included"],
                "time_zone": BASIS["time_zone"],
                "not_guaranteed": NOT_GUARANTEED,
            },
            "disclosure": {
                "version": statement.disclosure_version,
                "text_sha256": statement.disclosure_sha256,
                "text": disclosure.text if disclosure is not None else "",
            },
        }
    }
    return Event(
        type=EventType.STATEMENT_PUBLISHED,
        owner_ids=[statement.owner_id],
        data=data,
        dedupe_key=f"statement.published:{statement.pk}",
    )

"""Billing's audit trail: every billing action writes one ``accounts.AuditEntry``.

Each service that changes a money input, a period's status or a statement's status calls
``billing_audit`` inside its own transaction, as fleet's services do, so a refused or rolled
back change leaves no entry. Actions are named ``billing.<object>.<verb>``; ``docs/accounting.md``
lists them all (``BILLING_ACTIONS`` here, checked by the tests against the docs).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from accounts.models import User
from accounts.services import AuditEvent, audit_log

# Every action billing audits, by the object it is about.
BILLING_ACTIONS: tuple[str, ...] = (
    "billing.rate_card.create",
    "billing.rate_card.end",
    "billing.pool_basis.set",
    "billing.rental.create",
    "billing.pool.add",
    "billing.adjustment.add",
    "billing.payout.record",
    "billing.period.close_start",
    "billing.period.compute",
    "billing.owner.recompute",
    "billing.period.reopen",
    "billing.period.close_finish",
    "billing.period.reconcile",
    "billing.statement.publish_request",
    "billing.statement.publish_approve",
)


def billing_audit(
    obj: models.Model,
    *,
    action: str,
    by: User | None,
    reason: str = "",
    before: Any = None,
    after: Any = None,
) -> None:
    """One audit entry about ``obj`` (``by`` None: Steward itself, no operator)."""
    if action not in BILLING_ACTIONS:  # a new action is listed (and documented) first
        raise ValueError(f"{action!r} is not one of billing's audited actions.")
    audit_log(
        actor=by,
        reason=reason.strip(),
        events=[AuditEvent.of(obj, action=action, before=before, after=after)],
    )


def values(obj: models.Model, *names: str) -> dict[str, Any]:
    """Some fields of a row, as an entry's before/after (foreign keys by their ``_id``)."""
    return {name: getattr(obj, name) for name in names}

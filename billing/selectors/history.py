"""Billing's audit trail as the console shows it: an object's entries, and a period's."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast

from accounts.models import AuditEntry
from billing.models import (
    Adjustment,
    ClusterBilling,
    Payout,
    Period,
    PoolRevenue,
    RateCard,
    Rental,
    Statement,
)

HISTORY_LIMIT = 200


def _about(model: type[models.Model], rows: QuerySet[Any]) -> Q:
    """Entries about any of ``rows`` (one subquery: ids as the text ``object_id`` holds)."""
    ids = rows.order_by().annotate(text_id=Cast("pk", CharField())).values("text_id")
    return Q(object_type=model._meta.label_lower, object_id__in=ids)


def audit_trail(*, obj: models.Model, limit: int = HISTORY_LIMIT) -> list[AuditEntry]:
    """What was done to ``obj``, newest first (as a GPU's page lists its trail)."""
    return list(
        AuditEntry.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk))
        .select_related("actor")
        .order_by("-at", "-id")[:limit]
    )


def period_history(*, period: Period, limit: int = HISTORY_LIMIT) -> list[AuditEntry]:
    """Everything billing recorded that bears on ``period``, newest first: its close steps,
    its statements' publishing, its pool amounts and adjustments, payouts dated in it, and
    the rentals, rate cards and pool-basis changes that reach into it."""
    start, end = period.start, period.end
    reaching = Q(effective_to__isnull=True) | Q(effective_to__gt=start)
    about = (
        _about(Period, Period.objects.filter(pk=period.pk))
        | _about(Statement, Statement.objects.filter(period=period))
        | _about(PoolRevenue, PoolRevenue.objects.filter(period=period))
        | _about(Adjustment, Adjustment.objects.filter(period=period))
        | _about(Payout, Payout.objects.filter(paid_on__gte=start.date(), paid_on__lt=end.date()))
        | _about(Rental, Rental.objects.filter(starts_at__lt=end, ends_at__gt=start))
        | _about(RateCard, RateCard.objects.filter(reaching, effective_from__lt=end))
        | _about(
            ClusterBilling,
            ClusterBilling.objects.filter(effective_from__gte=start, effective_from__lt=end),
        )
    )
    return list(
        AuditEntry.objects.filter(about, action__startswith="billing.")
        .select_related("actor")
        .order_by("-at", "-id")[:limit]
    )

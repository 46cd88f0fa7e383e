"""Corrections and payments, append-only."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Owner, User
from billing.models.fields import money_field
from billing.models.periods import Period
from billing.models.statements import Statement, StatementLine


class Adjustment(models.Model):
    """An amount for an owner in an open period; corrections name what they correct."""

    class Source(models.TextChoices):
        MANUAL = "manual", "Manual"
        RECONCILIATION = "reconciliation", "Reconciliation"

    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="adjustments")
    period = models.ForeignKey(Period, on_delete=models.PROTECT, related_name="adjustments")
    currency = models.CharField(max_length=3)
    amount = money_field()
    reason = models.TextField()
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)
    corrects_statement = models.ForeignKey(
        Statement, on_delete=models.PROTECT, null=True, blank=True, related_name="corrected_by"
    )
    corrects_line = models.ForeignKey(
        StatementLine, on_delete=models.PROTECT, null=True, blank=True, related_name="adjustments"
    )
    # Reconciliation runs are idempotent: one adjustment per corrected line and run key.
    idempotency_key = models.CharField(max_length=100, unique=True, null=True, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["period", "created_at"]
        constraints: ClassVar = [
            models.CheckConstraint(condition=~Q(amount=0), name="billing_adjustment_not_zero"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.currency} for {self.owner.legal_name}"


class Payout(models.Model):
    """Money paid to an owner, recorded against their balance."""

    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="payouts")
    currency = models.CharField(max_length=3)
    amount = money_field()
    paid_on = models.DateField()
    reference = models.CharField(max_length=100, unique=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-paid_on"]
        constraints: ClassVar = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="billing_payout_positive"),
        ]

    def __str__(self) -> str:
        return f"payout {self.reference}"

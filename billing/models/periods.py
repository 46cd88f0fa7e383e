"""Accounting periods: half-open UTC ranges, calendar months by default."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import F, Q
from django.utils import timezone


class Period(models.Model):
    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLOSING = "closing", "Closing"
        CLOSED = "closed", "Closed"

    start = models.DateTimeField(unique=True)
    end = models.DateTimeField(unique=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    closing_started_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-start"]
        permissions: ClassVar = [
            ("close_period", "Can close, recompute, finish and reconcile periods"),
        ]
        constraints: ClassVar = [
            models.CheckConstraint(condition=Q(end__gt=F("start")), name="billing_period_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m}" if self.start.day == 1 else f"{self.start:%Y-%m-%d}"

"""Dated, fractional ownership of GPUs.

An owner holds ``share_bps`` (1 to 10,000 basis points) of a GPU over ``[valid_from, valid_to)``.
At every instant a GPU's shares add up to at most 10,000; the rest belongs to the operator.
The database enforces that with a deferred constraint trigger (migration 0002), so no path —
ORM, bulk, raw SQL — can over-allocate. One owner holds one row per GPU at a time. Rows are
closed and opened, never edited in place.
"""

from __future__ import annotations

from decimal import Decimal
from typing import ClassVar

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Owner, User
from fleet.models.inventory import Gpu

FULL_SHARE_BPS = 10_000


def share_percent(share_bps: int) -> str:
    """A share as operators and owners read it: 2500 bps → ``25 %``, 3333 → ``33.33 %``.

    Exact: a basis point is 0.01 %, so two decimals always suffice (no rounding)."""
    text = f"{Decimal(share_bps) / 100:.2f}".rstrip("0").rstrip(".")
    return f"{text} %"


class Ownership(models.Model):
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="ownerships")
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="ownerships")
    share_bps = models.PositiveIntegerField(help_text="Basis points: 10,000 = the whole GPU.")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(help_text="Why this ownership began (sale, transfer, …).")
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["gpu", "valid_from", "owner"]
        indexes: ClassVar = [models.Index(fields=["owner", "valid_from"])]
        # Seeing ownership is ``view_ownership``; changing it (sell, transfer, buy back) is
        # this permission, held by the operators trusted with it, never by read-only staff.
        permissions: ClassVar = [
            ("transfer_ownership", "Can sell, transfer and buy back GPU ownership"),
        ]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(share_bps__gte=1) & Q(share_bps__lte=FULL_SHARE_BPS),
                name="fleet_ownership_share_range",
            ),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gt=F("valid_from")),
                name="fleet_ownership_positive_interval",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner.legal_name} holds {self.share_percent} of {self.gpu.serial}"

    @property
    def share_percent(self) -> str:
        return share_percent(self.share_bps)

"""Statements: one per owner, period and currency; immutable once published.

The database enforces immutability (billing migrations 0002 and 0005): a published statement
and its lines reject UPDATE, DELETE and TRUNCATE from any path, raw SQL included. A statement
stores its frozen inputs and the SHA-256 of its canonical content, so recomputing reproduces
the hash.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models
from django.db.models import F, Q

from accounts.models import Owner, User
from billing.models.fields import JsonTextField, money_field
from billing.models.periods import Period
from fleet.models import Gpu


class Statement(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        PUBLISH_REQUESTED = "publish_requested", "Publish requested"
        PUBLISHED = "published", "Published"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="statements")
    period = models.ForeignKey(Period, on_delete=models.PROTECT, related_name="statements")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    opening_balance = money_field(help_text="Carried from before.")
    lines_total = money_field()
    adjustments_total = money_field()
    payouts_total = money_field()
    closing_balance = money_field()
    frozen_inputs = JsonTextField(help_text="Everything the figures were computed from.")
    content_sha256 = models.CharField(max_length=64)
    disclosure_version = models.CharField(max_length=32)
    disclosure_sha256 = models.CharField(max_length=64)
    computed_at = models.DateTimeField()
    requested_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-period__start", "owner__legal_name"]
        permissions: ClassVar = [
            ("publish_statement", "Can request and approve the publishing of statements"),
        ]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["owner", "period", "currency"],
                name="billing_statement_one_per_owner_period",
            ),
            models.CheckConstraint(
                condition=~Q(status="published")
                | (
                    Q(approved_by__isnull=False)
                    & Q(requested_by__isnull=False)
                    & Q(published_at__isnull=False)
                    & ~Q(approved_by=F("requested_by"))
                ),
                name="billing_statement_published_by_a_second_operator",
            ),
            models.CheckConstraint(
                condition=Q(
                    closing_balance=F("opening_balance")
                    + F("lines_total")
                    + F("adjustments_total")
                    - F("payouts_total")
                ),
                name="billing_statement_balance_adds_up",
            ),
        ]

    def __str__(self) -> str:
        # Names, not ids: operators read this as the statement's title (select_related the
        # owner and period where many are listed).
        status = self.get_status_display()
        return f"{self.owner.legal_name} · {self.period} · {self.currency} ({status})"


# A statement line's published figures, in order: the columns of its CSV and JSON, the
# API's line fields, and what the close writes (after the statement id).
LINE_FIELDS: tuple[str, ...] = (
    "position",
    "kind",
    "gpu_id",
    "description",
    "starts_at",
    "ends_at",
    "share_bps",
    "in_service_s",
    "up_s",
    "down_s",
    "maintenance_s",
    "no_data_s",
    "availability",
    "utilization",
    "busy_gpu_hours",
    "energy_kwh",
    "gross",
    "hosting_fee",
    "power_cost",
    "management_fee",
    "net",
    "corrects_line_id",
)


class StatementLine(models.Model):
    """A GPU line (owner's run of constant share) or an adjustment line."""

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        ADJUSTMENT = "adjustment", "Adjustment"

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    description = models.CharField(max_length=300, blank=True)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    share_bps = models.PositiveIntegerField(null=True, blank=True)
    in_service_s = models.BigIntegerField(default=0)
    up_s = models.BigIntegerField(default=0)
    down_s = models.BigIntegerField(default=0)
    maintenance_s = models.BigIntegerField(default=0)
    no_data_s = models.BigIntegerField(default=0)
    availability = models.DecimalField(max_digits=9, decimal_places=6, null=True, blank=True)
    utilization = models.DecimalField(max_digits=9, decimal_places=6, null=True, blank=True)
    busy_gpu_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    energy_kwh = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    gross = money_field(default=0)
    hosting_fee = money_field(default=0)
    power_cost = money_field(default=0)
    management_fee = money_field(default=0)
    net = money_field()
    corrects_line = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="corrections"
    )

    class Meta:
        ordering: ClassVar = ["statement", "position"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["statement", "position"], name="billing_line_position_unique"
            ),
            models.CheckConstraint(
                condition=Q(kind="adjustment")
                | Q(net=F("gross") - F("hosting_fee") - F("power_cost") - F("management_fee")),
                name="billing_line_net_adds_up",
            ),
            models.CheckConstraint(
                condition=~Q(kind="gpu") | Q(gpu__isnull=False), name="billing_line_gpu_has_gpu"
            ),
        ]

    def __str__(self) -> str:
        # Self-contained: inlines list many lines of one statement without loading it again.
        return (
            f"line {self.position}: {self.description}"
            if self.description
            else f"line {self.position}"
        )

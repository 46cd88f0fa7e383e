"""What a cluster costs (rate cards) and earns (rentals and pool amounts)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import User
from billing.models.fields import money_field
from billing.models.periods import Period
from fleet.models import Cluster, Gpu

# Where a cluster's first billing settings begin: the settings it had before they were
# dated (billing 0008) hold from here, and a cluster with no row at all splits by up seconds.
BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)


class ClusterBilling(models.Model):
    """A cluster's billing settings from ``effective_from`` until its next row: effective-dated
    like rate cards, and only ever added (``billing.services.revenue.cluster_pool_basis_set``),
    so the history of a setting stays and a computed period keeps the one it was computed
    with. A row takes effect at the start of a calendar month, a period's start: each period
    has one set of settings, those in force at its start (``billing.selectors.facts``)."""

    class PoolBasis(models.TextChoices):
        UP_SECONDS = "up_seconds", "Up seconds"
        BUSY_GPU_HOURS = "busy_gpu_hours", "Busy GPU-hours"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="billing_settings")
    effective_from = models.DateTimeField(
        help_text="UTC; the first second of a calendar month (a period's start)."
    )
    pool_split_basis = models.CharField(
        max_length=16,
        choices=PoolBasis.choices,
        default=PoolBasis.UP_SECONDS,
        help_text="How a pool amount is split over the cluster's GPUs.",
    )
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["cluster", "effective_from"]
        verbose_name = "cluster pool basis"
        verbose_name_plural = "cluster pool bases"
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["cluster", "effective_from"], name="billing_clusterbilling_one_per_instant"
            ),
        ]

    def __str__(self) -> str:
        return f"billing of {self.cluster} from {self.effective_from:%Y-%m-%d}"


class RateCard(models.Model):
    """Fees in force for a cluster, in one currency, over ``[effective_from, effective_to)``.

    Cards of one cluster and currency never overlap (database trigger, billing 0002).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="rate_cards")
    currency = models.CharField(max_length=3)
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    hosting_fee_per_gpu_month = models.DecimalField(
        max_digits=14, decimal_places=4, validators=[MinValueValidator(0)]
    )
    price_per_kwh = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    pue = models.DecimalField(
        "PUE", max_digits=5, decimal_places=3, validators=[MinValueValidator(1)]
    )
    management_fee_pct = models.DecimalField(
        max_digits=5, decimal_places=2, validators=[MinValueValidator(0)]
    )
    waive_hosting_in_operator_incidents = models.BooleanField(
        default=False, help_text="No hosting fee for seconds inside an operator-caused incident."
    )
    waive_hosting_when_down = models.BooleanField(
        default=False,
        help_text=(
            "No hosting fee for seconds telemetry says the GPU was down with no incident "
            "recorded. Off (the default): those seconds are charged like any in-service second."
        ),
    )
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["cluster", "currency", "effective_from"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=F("effective_from")),
                name="billing_ratecard_positive_interval",
            ),
            models.CheckConstraint(
                condition=Q(hosting_fee_per_gpu_month__gte=0)
                & Q(price_per_kwh__gte=0)
                & Q(pue__gte=1)
                & Q(management_fee_pct__gte=0)
                & Q(management_fee_pct__lte=100),
                name="billing_ratecard_sane_prices",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="billing_ratecard_currency_iso4217"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.currency} from {self.effective_from:%Y-%m-%d}"


class Rental(models.Model):
    """GPUs of a cluster rented over an interval at a rate per GPU-hour."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="rentals")
    gpus = models.ManyToManyField(Gpu, through="RentalGpu", related_name="rentals")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    rate_per_gpu_hour = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    currency = models.CharField(max_length=3)
    customer_reference = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-starts_at"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("starts_at")), name="billing_rental_positive_interval"
            ),
            models.CheckConstraint(
                condition=Q(rate_per_gpu_hour__gte=0), name="billing_rental_rate_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"rental {self.pk} on {self.cluster}"


class RentalGpu(models.Model):
    rental = models.ForeignKey(Rental, on_delete=models.CASCADE)
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["rental", "gpu"], name="billing_rentalgpu_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu.serial} in rental {self.rental_id}"


class PoolRevenue(models.Model):
    """An amount a cluster earned in a period, split over its GPUs."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    period = models.ForeignKey(Period, on_delete=models.PROTECT, related_name="pools")
    amount = money_field(validators=[MinValueValidator(0)])
    currency = models.CharField(max_length=3)
    description = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(amount__gte=0), name="billing_pool_amount_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"pool {self.amount} {self.currency} for {self.cluster}"

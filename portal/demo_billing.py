"""The demo's money: rate cards, the previous month's revenue, and its close and publication.

`make demo` backfills the previous month through the real telemetry path (simulated agents →
signed batches → ingest endpoint → worker → derived pass); once that backlog is processed,
``manage.py demo_close_period`` calls these to close the month the way operators do it in the
console: rate cards and revenue entered, the period closed, every statement requested by one
operator (oscar) and approved by another (olga). Idempotent: a rerun finds what exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from accounts.models import User
from billing.models import Period, PoolRevenue, RateCard, Rental, Statement
from billing.selectors.facts import pool_basis_in_force
from billing.selectors.pending import PendingTelemetry, telemetry_pending
from billing.services import closing, publishing, revenue
from fleet.models import Cluster, Gpu, Ownership, Placement
from portal.demo import DEMO_SITE
from portal.demo_nodes import DEMO_NODES
from telemetry.models import NodeStatus

# Per cluster code and billing currency: hosting fee per GPU-month, price per kWh.
RATE_CARDS = {
    ("a", "EUR"): (Decimal("150.00"), Decimal("0.19")),
    ("a", "USD"): (Decimal("165.00"), Decimal("0.21")),
    ("b", "USD"): (Decimal("190.00"), Decimal("0.21")),
}
PUE = Decimal("1.30")
MANAGEMENT_FEE_PCT = Decimal("10")
# Cluster A is rented by the GPU-hour, in the currency of each GPU's owner; cluster B earns a
# pool for the month, split over its GPUs by busy GPU-hours.
RENTAL_RATE = {"EUR": Decimal("2.10"), "USD": Decimal("2.30")}
POOL_B = Decimal("38000.00")
POOL_CURRENCY = "USD"


@dataclass(frozen=True)
class Backlog:
    """How far the demo's telemetry for a period has come through the pipeline."""

    slowest_node_at: datetime | None  # the least advanced demo node's last processed window
    telemetry: PendingTelemetry
    period_end: datetime

    @property
    def ready(self) -> bool:
        return (
            self.slowest_node_at is not None
            and self.slowest_node_at >= self.period_end
            and not self.telemetry.any
        )

    def describe(self) -> str:
        at = "nothing yet"
        if self.slowest_node_at is not None:
            at = f"{self.slowest_node_at:%Y-%m-%d %H:%M} UTC"
        waiting = self.telemetry.describe() or "nothing waiting"
        return f"slowest node processed up to {at}; {waiting}"


def demo_backlog(*, period: Period, hostnames: list[str] | None = None) -> Backlog:
    """Where the demo nodes' telemetry (or that of ``hostnames``) stands for ``period``;
    cheap to ask every few seconds."""
    hostnames = hostnames or [node.hostname for node in DEMO_NODES]
    ends = list(
        NodeStatus.objects.filter(node__hostname__in=hostnames).values_list(
            "last_window_end", flat=True
        )
    )
    slowest = None if len(ends) < len(hostnames) or None in ends else min(e for e in ends if e)
    return Backlog(
        slowest_node_at=slowest,
        telemetry=telemetry_pending(start=period.start, end=period.end),
        period_end=period.end,
    )


def _owned_in(period: Period, gpus: list[Gpu]) -> dict[Gpu, set[str]]:
    """Each GPU's holders' billing currencies during the period (none: the operator's own)."""
    currencies: dict[Gpu, set[str]] = {gpu: set() for gpu in gpus}
    rows = Ownership.objects.filter(gpu__in=gpus, valid_from__lt=period.end).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=period.start)
    )
    by_pk = {gpu.pk: gpu for gpu in gpus}
    for gpu_id, owner_currency in rows.values_list("gpu_id", "owner__billing_currency"):
        currencies[by_pk[gpu_id]].add(owner_currency)
    return currencies


def demo_revenue_ensure(*, period: Period, by: User) -> None:
    """Rate cards (from the period on, open-ended) and the period's revenue, once."""
    clusters = {c.code: c for c in Cluster.objects.filter(site__code=DEMO_SITE)}
    for (code, currency), (hosting, kwh) in RATE_CARDS.items():
        if not RateCard.objects.filter(cluster=clusters[code], currency=currency).exists():
            revenue.rate_card_create(
                cluster=clusters[code],
                currency=currency,
                effective_from=period.start,
                effective_to=None,
                hosting_fee_per_gpu_month=hosting,
                price_per_kwh=kwh,
                pue=PUE,
                management_fee_pct=MANAGEMENT_FEE_PCT,
                waive_hosting_in_operator_incidents=True,
                by=by,
            )
    reference = f"DEMO-{period.start:%Y-%m}"
    rentals = Rental.objects.filter(cluster=clusters["a"], customer_reference__startswith=reference)
    if not rentals.exists():
        gpus = list(
            Gpu.objects.filter(
                pk__in=Placement.objects.filter(
                    node__cluster=clusters["a"], valid_from__lte=period.start
                )
                .filter(Q(valid_to__isnull=True) | Q(valid_to__gte=period.end))
                .values("gpu_id")
            ).order_by("serial")
        )
        # A GPU sold inside the period between owners billed in different currencies is not
        # rented that month: Steward converts no currencies, and a GPU's revenue is split over
        # all its holders (docs/accounting.md §9).
        by_currency: dict[str, list[Gpu]] = {}
        for gpu, currencies in _owned_in(period, gpus).items():
            if len(currencies) <= 1:
                by_currency.setdefault(next(iter(currencies), "EUR"), []).append(gpu)
        for currency, rented in sorted(by_currency.items()):
            revenue.rental_create(
                cluster=clusters["a"],
                gpus=rented,
                starts_at=period.start,
                ends_at=period.end,
                rate_per_gpu_hour=RENTAL_RATE[currency],
                currency=currency,
                customer_reference=f"{reference}-A-{currency}",
                by=by,
            )
    if not PoolRevenue.objects.filter(cluster=clusters["b"], period=period).exists():
        if pool_basis_in_force(cluster_id=clusters["b"].pk, at=period.start) != "busy_gpu_hours":
            revenue.cluster_pool_basis_set(
                cluster=clusters["b"],
                basis="busy_gpu_hours",
                effective_from=period.start,
                reason="Demo: cluster B's pool is split by busy GPU-hours.",
                by=by,
            )
        revenue.pool_add(
            cluster=clusters["b"],
            period=period,
            amount=POOL_B,
            currency=POOL_CURRENCY,
            description=f"Demo: cluster B's marketplace earnings, {period.start:%B %Y}.",
            by=by,
        )


def demo_period_publish(*, period: Period, requester: User, approver: User) -> list[Statement]:
    """Closes ``period`` and publishes every statement (one operator asks, another approves),
    then marks the period closed. Picks up wherever an earlier run stopped."""
    period.refresh_from_db()
    if period.status == Period.Status.OPEN:
        demo_revenue_ensure(period=period, by=requester)
        closing.period_close(period=period, by=requester)
    elif period.status == Period.Status.CLOSING:
        closing.period_close_run(period=period)
    period.refresh_from_db()
    if period.status == Period.Status.CLOSING:
        for statement in period.statements.filter(status=Statement.Status.DRAFT).order_by("pk"):
            publishing.statement_publish_request(statement=statement, by=requester)
        requested = period.statements.filter(status=Statement.Status.PUBLISH_REQUESTED)
        for statement in requested.order_by("pk"):
            publishing.statement_publish_approve(statement=statement, by=approver)
        closing.period_close_finish(period=period, by=approver)
    return list(period.statements.select_related("owner").order_by("owner__legal_name"))

"""Money on top of the small fleet of ``tests.portal.world`` (now: 2026-11-21 12:00 UTC).

Cluster a has rate cards in EUR (alice) and USD (bob, who bought X on Nov 10), cluster b in
USD: hosting 100.00 a GPU-month, power 0.20 per kWh at PUE 1.5, management 10 %. A1 is rented
for November at 1.00 EUR per GPU-hour. October and September have published statements,
written here as rows (the close is tested in tests/billing): alice's September closed at
−10.00 EUR, which carries into October (lines 78.00: closing 68.00); bob's October closed at
500.00 USD. Alice was paid 50.00 EUR on Nov 5 (P-ALICE-1), bob 100.00 USD (P-BOB-1).

Alice's November so far, worked out by hand (492 hours from Nov 1 to Nov 21 12:00):
* A1 is up 482 h (492 less 2 h down and 6 h silent without telemetry, less the 2 h of
  maintenance): gross 482 × 1.00 = 482.00; hosting 100 × 492 h / 720 h = 68.333… → 68.33;
  energy: 484 hours of rollups × 0.7 kWh = 338.8 kWh × 1.5 × 0.20 = 101.64; management
  10 % = 48.20; net 263.83.
* A2 (in service, no telemetry, no rental): hosting 68.33, net −68.33.
* X, held until Nov 10 00:00 (216 h): hosting 100 × 216 / 720 = 30.00, net −30.00.
Totals: gross 482.00, hosting 166.66, power 101.64, management 48.20, net 165.50.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from accounts import services as accounts
from accounts.models import Owner, User
from billing.models import Payout, Period, Statement, StatementLine
from billing.services.ledger import payout_record
from billing.services.periods import period_for_month
from billing.services.revenue import rate_card_create, rental_create
from fleet.models import Gpu
from tests.portal.world import NOW, World

D = Decimal
UTC = dt.UTC


@dataclass
class Money:
    alice_september: Statement
    alice_october: Statement
    bob_october: Statement
    alice_payout: Payout
    bob_payout: Payout


def published_statement(
    *,
    owner: Owner,
    period: Period,
    opening: str,
    lines: list[tuple[Gpu, str, str, str, str]],
    requested_by: User,
    approved_by: User,
) -> Statement:
    disclosure = accounts.disclosure_standard_ensure()
    nets = [D(g) - D(h) - D(p) - D(m) for _, g, h, p, m in lines]
    total = sum(nets, D("0.00"))
    statement = Statement.objects.create(
        owner=owner,
        period=period,
        currency=owner.billing_currency,
        opening_balance=D(opening),
        lines_total=total,
        adjustments_total=D("0.00"),
        payouts_total=D("0.00"),
        closing_balance=D(opening) + total,
        frozen_inputs={},
        content_sha256="0" * 64,
        disclosure_version=disclosure.version,
        disclosure_sha256=disclosure.text_sha256,
        computed_at=period.end,
    )
    for position, ((gpu, gross, hosting, power, management), net) in enumerate(
        zip(lines, nets, strict=True), start=1
    ):
        StatementLine.objects.create(
            statement=statement,
            position=position,
            kind=StatementLine.Kind.GPU,
            gpu=gpu,
            starts_at=period.start,
            ends_at=period.end,
            share_bps=10_000,
            gross=D(gross),
            hosting_fee=D(hosting),
            power_cost=D(power),
            management_fee=D(management),
            net=net,
        )
    Statement.objects.filter(pk=statement.pk).update(
        status=Statement.Status.PUBLISHED,
        requested_by=requested_by,
        requested_at=period.end,
        approved_by=approved_by,
        published_at=period.end + dt.timedelta(days=2),
    )
    statement.refresh_from_db()
    return statement


def build(*, world: World, oscar: User, olga: User, alice_owner: Owner, bob_owner: Owner) -> Money:
    cluster = world.a1.placements.get().node.cluster
    cluster_b = world.b1.placements.get().node.cluster
    for on, currency in ((cluster, "EUR"), (cluster, "USD"), (cluster_b, "USD")):
        rate_card_create(
            cluster=on,
            currency=currency,
            effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC),
            effective_to=None,
            hosting_fee_per_gpu_month=D("100.00"),
            price_per_kwh=D("0.20"),
            pue=D("1.5"),
            management_fee_pct=D("10"),
            waive_hosting_in_operator_incidents=False,
            by=oscar,
        )
    rental_create(
        cluster=cluster,
        gpus=[world.a1],
        starts_at=dt.datetime(2026, 11, 1, tzinfo=UTC),
        ends_at=dt.datetime(2026, 12, 1, tzinfo=UTC),
        rate_per_gpu_hour=D("1.00"),
        currency="EUR",
        customer_reference="R-NOV",
        by=oscar,
    )
    september, october = (period_for_month(year=2026, month=m) for m in (9, 10))
    alice_september = published_statement(
        owner=alice_owner,
        period=september,
        opening="0.00",
        lines=[(world.a1, "0.00", "10.00", "0.00", "0.00")],
        requested_by=oscar,
        approved_by=olga,
    )
    alice_october = published_statement(
        owner=alice_owner,
        period=october,
        opening="-10.00",
        lines=[(world.a1, "120.00", "20.00", "10.00", "12.00")],
        requested_by=oscar,
        approved_by=olga,
    )
    bob_october = published_statement(
        owner=bob_owner,
        period=october,
        opening="0.00",
        lines=[(world.b1, "600.00", "30.00", "10.00", "60.00")],
        requested_by=oscar,
        approved_by=olga,
    )
    Period.objects.filter(pk__in=[september.pk, october.pk]).update(
        status=Period.Status.CLOSED, closed_at=NOW - dt.timedelta(days=15)
    )
    alice_payout = payout_record(
        owner=alice_owner,
        currency="EUR",
        amount=D("50.00"),
        paid_on=dt.date(2026, 11, 5),
        reference="P-ALICE-1",
        by=oscar,
    )
    bob_payout = payout_record(
        owner=bob_owner,
        currency="USD",
        amount=D("100.00"),
        paid_on=dt.date(2026, 11, 6),
        reference="P-BOB-1",
        by=oscar,
    )
    return Money(alice_september, alice_october, bob_october, alice_payout, bob_payout)

"""Issue 19, part 6: the rules docs/accounting.md left open, each held through the real close.

Every scenario is built at the data level (``tests.billing.scenario``), closed with
``period_close`` (``period_close_start`` then ``period_close_run``) on PostgreSQL, and every
figure asserted is worked out by hand in the comment above it:

* a — a rate card changes its management percentage inside one ownership run: the fee is
  the owner's gross × the percentages weighted by the revenue earned under each card;
* b — revenue that is not whole cents: a GPU's rentals are summed exactly and rounded once
  per GPU (and cluster), not once per rental;
* e — energy before service (burn-in) is not charged and needs no rate card; time in
  service with no card in force refuses the close, naming the span;
* f — a GPU that changed clusters weighs in each cluster's pool with its time there only;
* g — an owner who sold every GPU gets a statement carrying a nonzero balance (no lines),
  payouts against it included, and none once the balance is zero.

The worlds are plain functions so that ``tests/verify`` runs steward-verify on the same
statements, published.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from accounts.models import User
from billing.engine.terms import statement_terms
from billing.models import Period, RateCard, Statement
from billing.services.closing import period_close, period_close_finish
from billing.services.ledger import payout_record
from billing.services.periods import period_for_month
from billing.services.revenue import (
    cluster_pool_basis_set,
    pool_add,
    rate_card_end,
    rental_create,
)
from fleet.models import Cluster, Gpu, LifecycleState, Node, Placement
from fleet.services.lifecycle import gpus_transition
from fleet.services.ownership import ShareTo, ownership_transfer
from fleet.services.placement import gpu_move
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)
ZERO = D("0.00")
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
# March 2026: 31 days, 2,678,400 s, 744 h; 44,640 minutes at 0.01 kWh = 446.4 kWh.


def _up_all_march(gpu: Gpu, node: Node, util: float = 50.0) -> None:
    """Up every minute of March at ``util`` %, 0.01 kWh a minute, from February's last
    minute (so March's first window has a counter delta too)."""
    s.windows(gpu, MARCH[0] - MINUTE, MARCH[1], node=node, util=util)


def _rent(
    by: User,
    cluster: Cluster,
    gpus: list[Gpu],
    span: tuple[dt.datetime, dt.datetime],
    rate: str,
    reference: str,
) -> None:
    rental_create(
        cluster=cluster,
        gpus=gpus,
        starts_at=span[0],
        ends_at=span[1],
        rate_per_gpu_hour=D(rate),
        currency="EUR",
        customer_reference=reference,
        by=by,
    )


def _gpu_lines(statement: Statement) -> list[Any]:
    return list(statement.lines.filter(kind="gpu").order_by("position"))


# a. The management fee when the rate card changes its percentage inside one run ------------

CARD_CHANGE = dt.datetime(2026, 3, 11, tzinfo=UTC)  # 10 days at the first card, 21 at the next


def management_change_world(by: User) -> dict[str, Any]:
    """SN-1, wholly Alice's, up all March at 50 %. Its cluster's card (10 % management fee)
    is ended at 11 March 00:00 and followed by one at 12.5 %, all else equal (hosting
    100.00 a month, 0.20 per kWh at PUE 1.5). Rented 1–16 March at 2.50 per GPU-hour: 240
    hours under the first card, 120 under the second, so the revenue under each differs."""
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, by)
    rate_card_end(card=RateCard.objects.get(cluster=f.cluster), at=CARD_CHANGE, by=by)
    s.card(f, by, effective_from=CARD_CHANGE, management_fee_pct=D("12.5"))
    _up_all_march(gpu, f.node)
    s.rebuild(*MARCH)
    _rent(by, f.cluster, [gpu], (MARCH[0], dt.datetime(2026, 3, 16, tzinfo=UTC)), "2.50", "R-A")
    return {"fleet": f, "gpu": gpu, "alice": alice, "period": period_for_month(year=2026, month=3)}


def test_a_management_fee_changing_inside_a_run_is_weighted_by_the_revenue_under_each_card(
    oscar, disclosure
):
    w = management_change_world(oscar)
    period_close(period=w["period"], by=oscar)
    alice = Statement.objects.get(owner=w["alice"], period=w["period"])
    (line,) = _gpu_lines(alice)  # one run: the card change does not split the line
    assert (line.starts_at, line.ends_at) == MARCH
    # Rental: 360 up hours × 2.50 = 900.00, all Alice's: 240 h × 2.50 = 600.00 earned under
    # the 10 % card, 120 h × 2.50 = 300.00 under the 12.5 % card.
    assert line.gross == D("900.00")
    # Fee = gross × (600.00 × 10 % + 300.00 × 12.5 %) ÷ 900.00 = 900.00 × 10.8333…% = 97.50,
    # neither 10 % (90.00) nor 12.5 % (112.50) of the gross, nor the percentages weighted by
    # time (10 × 10/31 + 12.5 × 21/31 = 11.69…%: 105.24).
    assert line.management_fee == D("97.50")
    # Hosting 100.00 × (864,000 + 1,814,400) ÷ 2,678,400 = 100.00; power 446.4 × 1.5 × 0.20.
    assert (line.hosting_fee, line.power_cost) == (D("100.00"), D("133.92"))
    # 900.00 − 100.00 − 133.92 − 97.50.
    assert line.net == D("568.58")
    assert alice.closing_balance == D("568.58")
    # The line's terms list both cards with their own percentage, cut at the change.
    (terms,) = statement_terms(alice.frozen_inputs) or []
    assert [(c["from"], c["to"], c["management_fee_pct"]) for c in terms["rate_cards"]] == [
        ("2026-03-01T00:00:00Z", "2026-03-11T00:00:00Z", "10.00"),
        ("2026-03-11T00:00:00Z", "2026-04-01T00:00:00Z", "12.50"),
    ]


# b. Revenue that is not whole cents: rounded once per GPU, not per rental ----------------


def fractional_cents_world(by: User) -> dict[str, Any]:
    """SN-1 (Alice's) and SN-2 (Bob's) up all March, no pool, two rentals at 2.00 per
    GPU-hour, each worth an odd half cent per GPU: R-1 rents both GPUs for 9 s (2.00 × 9 ÷
    3600 = 0.005 each), R-2 rents SN-1 alone for 4,509 s (1 h 15 min 9 s: 2.505)."""
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    s.own(sn1, alice, 10_000, s.EPOCH)
    s.own(sn2, bob, 10_000, s.EPOCH)
    s.card(f, by)
    for gpu in (sn1, sn2):
        _up_all_march(gpu, f.node)
    s.rebuild(*MARCH)
    short = dt.datetime(2026, 3, 2, 10, tzinfo=UTC)
    _rent(by, f.cluster, [sn1, sn2], (short, short + dt.timedelta(seconds=9)), "2.00", "R-1")
    long = dt.datetime(2026, 3, 3, 10, tzinfo=UTC)
    _rent(by, f.cluster, [sn1], (long, long + dt.timedelta(seconds=4_509)), "2.00", "R-2")
    return {"alice": alice, "bob": bob, "period": period_for_month(year=2026, month=3)}


def test_b_a_gpu_s_rentals_are_summed_exactly_and_rounded_once(oscar, disclosure):
    w = fractional_cents_world(oscar)
    period_close(period=w["period"], by=oscar)
    (a,) = _gpu_lines(Statement.objects.get(owner=w["alice"], period=w["period"]))
    (b,) = _gpu_lines(Statement.objects.get(owner=w["bob"], period=w["period"]))
    # SN-1: 0.005 + 2.505 = 2.510 exactly → 2.51. Rounded per rental, half to even, it would
    # be 0.00 + 2.50 = 2.50 (half up: 0.01 + 2.51 = 2.52).
    assert a.gross == D("2.51")
    # SN-2: its only revenue, 0.005, rounds once, half to even, to 0.00 (R-1's 0.01 over both
    # GPUs is never rounded as a whole: the unit is the GPU).
    assert b.gross == D("0.00")
    # Management 10 % of 2.51 = 0.251 → 0.25; hosting 100.00; power 446.4 kWh × 0.30.
    assert (a.management_fee, a.hosting_fee, a.power_cost) == (D("0.25"), D("100.00"), D("133.92"))
    assert (a.net, b.net) == (D("-231.66"), D("-233.92"))
    # The terms show each rental's exact amount, and the GPU's rentals rounded once.
    (terms,) = statement_terms(Statement.objects.get(owner=w["alice"]).frozen_inputs) or []
    assert [(r["up_s"], r["amount"]) for r in terms["rentals"]] == [
        (9, "0.005000"),
        (4_509, "2.505000"),
    ]
    assert terms["revenue"]["gpu_rentals"] == "2.51"


# e. Energy before service with no rate card in force ---------------------------------------

IN_SERVICE = dt.datetime(2026, 3, 10, tzinfo=UTC)  # 22 days of March in service


def burn_in_world(by: User, *, card_from: dt.datetime) -> dict[str, Any]:
    """SN-1, Alice's all month, placed in cluster A since before March but in burn-in until
    10 March 00:00, in service from then; its agent reports it up at 50 %, drawing 0.01 kWh
    a minute, all month (burn-in draws power too). The cluster's only card starts at
    ``card_from``."""
    f = s.fleet()
    gpu = Gpu.objects.create(
        nvml_uuid="GPU-SN-1", serial="SN-1", model=f.model, lifecycle_state=LifecycleState.RECEIVED
    )
    Placement.objects.create(gpu=gpu, node=f.node, slot=0, valid_from=s.EPOCH)
    gpus_transition(gpus=[gpu], state=LifecycleState.BURN_IN, at=MARCH[0] - MINUTE * 60, by=by)
    gpus_transition(gpus=[gpu], state=LifecycleState.IN_SERVICE, at=IN_SERVICE, by=by)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, by, effective_from=card_from)
    _up_all_march(gpu, f.node)
    s.rebuild(*MARCH)
    return {"fleet": f, "alice": alice, "period": period_for_month(year=2026, month=3)}


def test_e_energy_in_burn_in_is_not_charged_and_needs_no_rate_card(oscar, disclosure):
    # The cluster's first card starts when SN-1 enters service: the nine days of burn-in,
    # which drew 9 × 1,440 × 0.01 = 129.6 kWh, have no card, and the close is not refused.
    w = burn_in_world(oscar, card_from=IN_SERVICE)
    run = period_close(period=w["period"], by=oscar)
    assert run.written == 1
    (line,) = _gpu_lines(Statement.objects.get(owner=w["alice"], period=w["period"]))
    # Only in-service seconds count: 22 days = 1,900,800 s, all up. The burn-in days are in no
    # state at all (not no_data) and their energy is in no figure.
    assert (line.in_service_s, line.up_s, line.no_data_s) == (1_900_800, 1_900_800, 0)
    # 22 × 1,440 minutes × 0.01 kWh = 316.8 kWh (the month drew 446.4).
    assert line.energy_kwh == D("316.800000")
    # Power 316.8 × 1.5 × 0.20 = 95.04; hosting 100.00 × 1,900,800 ÷ 2,678,400 = 70.967… → 70.97.
    assert (line.power_cost, line.hosting_fee, line.gross) == (D("95.04"), D("70.97"), D("0.00"))
    assert line.net == D("-166.01")


def test_e_time_in_service_with_no_rate_card_refuses_the_close_naming_the_span(oscar, disclosure):
    # The same GPU and telemetry, but the card starts two days after SN-1 entered service:
    # 10–12 March are in service (and drew energy) with no card, so the close is refused and
    # the period goes back to open with nothing written. The span named is the run's time
    # with no card (from the start of the run, 1 March: the burn-in days are in it).
    w = burn_in_world(oscar, card_from=IN_SERVICE + dt.timedelta(days=2))
    with pytest.raises(ValidationError) as refused:
        period_close(period=w["period"], by=oscar)
    assert refused.value.message_dict["rate_card"] == [
        f"Cluster {w['fleet'].cluster}, EUR, GPU SN-1: no rate card is in force from "
        "2026-03-01 00:00:00 UTC to 2026-03-12 00:00:00 UTC, while the GPU was in service "
        "there; add a rate card that covers it."
    ]
    assert not Statement.objects.exists()
    assert Period.objects.get(pk=w["period"].pk).status == Period.Status.OPEN


# f. A pool's weight for a GPU that moved clusters within the period --------------------------

MOVE = dt.datetime(2026, 3, 15, 6, tzinfo=UTC)  # SN-1 in A for 1,231,200 s, in B for 1,447,200


def moved_pools_world(by: User) -> dict[str, Any]:
    """Cluster A (pool 200.00 split by up seconds) holds SN-1 (Alice's) until 15 March 06:00
    and SN-2 (Bob's) all month; cluster B (pool 100.00 split by busy GPU-hours, card: hosting
    120.00, 0.25 per kWh, management 12.5 %) holds SN-3 (Carla's) all month and SN-1 from
    the move. SN-1 and SN-2 run at 50 %, SN-3 at 80 %; every GPU is up every minute."""
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    b = Cluster.objects.create(site=f.site, code="b", name="B")
    b_fleet = s.Fleet(f.site, b, Node.objects.create(cluster=b, hostname="fra1-b-n01"), f.model)
    sn3 = s.gpu(b_fleet, "SN-3", slot=0)
    gpu_move(gpu=sn1, node=b_fleet.node, slot=1, at=MOVE, by=by, reason="rebalance")
    owners = [s.owner(n) for n in ("Alice Compute Ltd", "Bob Chen", "Carla Sun")]
    for gpu, owner in zip((sn1, sn2, sn3), owners, strict=True):
        s.own(gpu, owner, 10_000, s.EPOCH)
    s.card(f, by)
    s.card(
        b_fleet,
        by,
        hosting_fee_per_gpu_month=D("120.00"),
        price_per_kwh=D("0.25"),
        management_fee_pct=D("12.5"),
    )
    cluster_pool_basis_set(
        cluster=b, basis="busy_gpu_hours", effective_from=MARCH[0], reason="test", by=by
    )
    # SN-1's counter runs on across the move: 20,521 minutes from 28 February 23:59.
    s.windows(sn1, MARCH[0] - MINUTE, MOVE, node=f.node)
    s.windows(sn1, MOVE, MARCH[1], node=b_fleet.node, energy_start=20_521 * 36_000_000)
    _up_all_march(sn2, f.node)
    _up_all_march(sn3, b_fleet.node, util=80.0)
    s.rebuild(*MARCH)
    period = period_for_month(year=2026, month=3)
    for cluster, amount in ((f.cluster, "200.00"), (b, "100.00")):
        pool_add(
            cluster=cluster,
            period=period,
            amount=D(amount),
            currency="EUR",
            description="March pool",
            by=by,
        )
    return dict(zip(("alice", "bob", "carla"), owners, strict=True)) | {"period": period}


def test_f_a_gpu_that_moved_weighs_in_each_pool_with_its_time_there(oscar, disclosure):
    w = moved_pools_world(oscar)
    period_close(period=w["period"], by=oscar)
    alice = Statement.objects.get(owner=w["alice"], period=w["period"])
    # SN-1 has a line per cluster (in the order of the clusters' ids): name each by its terms.
    terms = statement_terms(alice.frozen_inputs) or []
    by_cluster = {
        t["cluster_name"]: (line, t) for line, t in zip(_gpu_lines(alice), terms, strict=True)
    }
    (in_a, a_terms), (in_b, b_terms) = by_cluster["A"], by_cluster["B"]
    (bob,) = _gpu_lines(Statement.objects.get(owner=w["bob"], period=w["period"]))
    (carla,) = _gpu_lines(Statement.objects.get(owner=w["carla"], period=w["period"]))
    assert (in_a.in_service_s, in_b.in_service_s) == (1_231_200, 1_447_200)

    # Pool A, by up seconds: SN-1 weighs its 1,231,200 s in A (not its 2,678,400 s of March),
    # SN-2 2,678,400 s; of 3,909,600: 200.00 × 1,231,200 ÷ 3,909,600 = 62.9834…, SN-2
    # 137.0165…; floors 62.98 + 137.01 leave a cent for the larger remainder, SN-2's.
    assert (in_a.gross, bob.gross) == (D("62.98"), D("137.02"))
    # Pool B, by busy seconds: SN-1 0.5 × 1,447,200 = 723,600 s (its time in B only), SN-3
    # 0.8 × 2,678,400 = 2,142,720 s; of 2,866,320: 100.00 × 723,600 ÷ 2,866,320 = 25.2449…,
    # SN-3 74.7550…; floors 25.24 + 74.75, the cent to the larger remainder, SN-3's.
    assert (in_b.gross, carla.gross) == (D("25.24"), D("74.76"))
    # Had SN-1 weighed its whole month in each pool: A 200.00 × 2,678,400 ÷ 5,356,800 = 100.00,
    # B 100.00 × 1,339,200 ÷ 3,481,920 = 38.46 — figures the lines above are not.

    # Costs of each line from its own cluster's card and seconds. A: hosting 100.00 × 1,231,200
    # ÷ 2,678,400 = 45.967… → 45.97; 20,520 min × 0.01 = 205.2 kWh × 1.5 × 0.20 = 61.56;
    # management 10 % × 62.98 = 6.298 → 6.30. Net 62.98 − 45.97 − 61.56 − 6.30 = −50.85.
    assert (in_a.hosting_fee, in_a.power_cost, in_a.management_fee) == (
        D("45.97"),
        D("61.56"),
        D("6.30"),
    )
    assert in_a.net == D("-50.85")
    # B: hosting 120.00 × 1,447,200 ÷ 2,678,400 = 64.838… → 64.84; 24,120 min × 0.01 = 241.2
    # kWh × 1.5 × 0.25 = 90.45; management 12.5 % × 25.24 = 3.155 → 3.16 (half to even).
    # Net 25.24 − 64.84 − 90.45 − 3.16 = −133.21.
    assert (in_b.hosting_fee, in_b.power_cost, in_b.management_fee) == (
        D("64.84"),
        D("90.45"),
        D("3.16"),
    )
    assert in_b.net == D("-133.21")
    assert alice.lines_total == D("-184.06")
    # The terms name each weight, and the cluster's total it was split against.
    pools = [a_terms["pool"], b_terms["pool"]]
    assert [(p["basis"], p["gpu_weight"], p["total_weight"], p["gpu_part"]) for p in pools] == [
        ("up_seconds", "1231200", "3909600", "62.98"),
        ("busy_gpu_hours", "723600.000", "2866320.000", "25.24"),  # busy s, to 0.001
    ]


# g. Statements that carry only a balance ---------------------------------------------------


def _closed(period: Period, oscar: User, olga: User) -> None:
    """The period closed, every statement published by two operators, the close finished."""
    period_close(period=period, by=oscar)
    s.publish_all(period, oscar, olga)
    period_close_finish(period=period, by=oscar)


def sold_everything_world(oscar: User, olga: User) -> dict[str, Any]:
    """February 2026 (28 days, 672 h): SN-1 (Alice's) rented at 2.00 and SN-2 (Carla's) at
    3.00 per GPU-hour all month, both up every minute; February is closed and published.
    Both sell to Bob at 1 March 00:00, the start of March, and own nothing after. Payouts
    dated 5 March: 900.00 to Alice, her whole balance to Carla. No March telemetry."""
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    alice, bob, carla = s.owner("Alice Compute Ltd"), s.owner("Bob Chen"), s.owner("Carla Sun")
    s.own(sn1, alice, 10_000, s.EPOCH)
    s.own(sn2, carla, 10_000, s.EPOCH)
    s.card(f, oscar)
    for gpu in (sn1, sn2):
        s.windows(gpu, FEB[0] - MINUTE, FEB[1], node=f.node)
    s.rebuild(*FEB)
    _rent(oscar, f.cluster, [sn1], FEB, "2.00", "R-1")
    _rent(oscar, f.cluster, [sn2], FEB, "3.00", "R-2")
    for gpu, seller in ((sn1, alice), (sn2, carla)):
        ownership_transfer(
            gpus=[gpu],
            from_owner=seller,
            to=[ShareTo(owner=bob, share_bps=10_000)],
            at=MARCH[0],
            reason="sold",
            by=oscar,
        )
    february = period_for_month(year=2026, month=2)
    _closed(february, oscar, olga)
    paid = {alice: D("900.00"), carla: Statement.objects.get(owner=carla).closing_balance}
    for n, (owner, amount) in enumerate(paid.items(), start=1):
        payout_record(
            owner=owner,
            currency="EUR",
            amount=amount,
            paid_on=dt.date(2026, 3, 5),
            reference=f"P-{n}",
            by=oscar,
        )
    return {
        "alice": alice,
        "bob": bob,
        "carla": carla,
        "february": february,
        "march": period_for_month(year=2026, month=3),
        "april": period_for_month(year=2026, month=4),
    }


def _balances(statement: Statement) -> tuple[Decimal, ...]:
    return (
        statement.opening_balance,
        statement.lines_total,
        statement.adjustments_total,
        statement.payouts_total,
        statement.closing_balance,
    )


def test_g_an_owner_who_sold_everything_gets_statements_carrying_the_balance(
    oscar, olga, disclosure
):
    w = sold_everything_world(oscar, olga)
    # February, per GPU: hosting 100.00; 403.2 kWh × 0.30 = 120.96; management 10 % of gross.
    # Alice: 672 h × 2.00 = 1,344.00 − 100.00 − 120.96 − 134.40 = 988.64.
    # Carla: 672 h × 3.00 = 2,016.00 − 100.00 − 120.96 − 201.60 = 1,593.44.
    feb = {o: Statement.objects.get(owner=w[o], period=w["february"]) for o in ("alice", "carla")}
    assert (feb["alice"].closing_balance, feb["carla"].closing_balance) == (
        D("988.64"),
        D("1593.44"),
    )

    # March: neither holds a GPU (the sale at 1 March 00:00 leaves no zero-length line), but
    # each has a balance and a payout: a statement with no lines carries them.
    _closed(w["march"], oscar, olga)
    alice_march = Statement.objects.get(owner=w["alice"], period=w["march"])
    carla_march = Statement.objects.get(owner=w["carla"], period=w["march"])
    assert not alice_march.lines.exists() and not carla_march.lines.exists()
    # Alice: 988.64 + 0 + 0 − 900.00 = 88.64. Carla: 1,593.44 − 1,593.44 = 0.00.
    assert _balances(alice_march) == (D("988.64"), ZERO, ZERO, D("900.00"), D("88.64"))
    assert _balances(carla_march) == (D("1593.44"), ZERO, ZERO, D("1593.44"), ZERO)
    assert alice_march.frozen_inputs["opening_from_statement"] == str(feb["alice"].pk)
    assert [p["amount"] for p in alice_march.frozen_inputs["payouts"]] == ["900.00"]
    # Bob holds both GPUs from 1 March, with no telemetry: hosting 100.00 each, nothing else.
    assert Statement.objects.get(owner=w["bob"], period=w["march"]).lines_total == D("-200.00")

    # April: Alice's 88.64 carries on a statement of its own, opening = closing; Carla, with
    # a zero balance and nothing else, has no statement at all.
    period_close(period=w["april"], by=oscar)
    alice_april = Statement.objects.get(owner=w["alice"], period=w["april"])
    assert not alice_april.lines.exists()
    assert _balances(alice_april) == (D("88.64"), ZERO, ZERO, ZERO, D("88.64"))
    assert alice_april.frozen_inputs["opening_from_statement"] == str(alice_march.pk)
    assert not Statement.objects.filter(owner=w["carla"], period=w["april"]).exists()
    assert set(Statement.objects.filter(period=w["april"]).values_list("owner", flat=True)) == {
        w["alice"].pk,
        w["bob"].pk,
    }

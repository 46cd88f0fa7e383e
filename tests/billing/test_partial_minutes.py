"""Worked example 2 of docs/accounting.md: an agent restart inside the minute of a transfer.

The world of worked example 1 (``scenario.worked_example``), with a pool split by busy
GPU-hours besides the rental, and the agent restarting around the transfer at 12:00:30 on
10 March: it stops at 11:59:35 (window 11:59 observed 0–35 s) and its successor starts at
12:00:20 (window 12:00 observed 20–60 s, 80 % busy). Every figure below is worked out by hand
from the rules; the close computes it from rollups (whole hours) and windows (the hours cut by
the transfer), and the published statement reproduces it from its frozen inputs.
"""

import datetime as dt
from decimal import Decimal

import pytest

from billing.engine.document import document_from_frozen, sha256_hex
from billing.models import Statement
from billing.services.closing import period_close
from billing.services.periods import period_for_month
from billing.services.revenue import cluster_pool_basis_set, pool_add
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC


@pytest.fixture
def restart_world(oscar, disclosure):
    world = s.worked_example(oscar, change=s.agent_restart_at_transfer)
    period = period_for_month(year=2026, month=3)
    cluster_pool_basis_set(
        cluster=world["fleet"].cluster,
        basis="busy_gpu_hours",
        effective_from=period.start,
        reason="worked example 2",
        by=oscar,
    )
    pool_add(
        cluster=world["fleet"].cluster,
        period=period,
        amount=D("300.00"),
        currency="EUR",
        description="March pool",
        by=oscar,
    )
    return {**world, "period": period}


def test_a_transfer_inside_a_partly_observed_minute(restart_world, oscar, olga):
    w = restart_world
    run = period_close(period=w["period"], by=oscar)
    assert (run.written, run.unchanged) == (2, 0)
    (a,) = Statement.objects.get(owner=w["alice"]).lines.all()
    (b,) = Statement.objects.get(owner=w["bob"]).lines.all()

    # Time. Alice holds 820,830 in-service seconds (to 12:00:30), Bob 1,857,570. Unobserved:
    # 11:59:35–12:00:20, 45 s, all Alice's; so Alice is up 820,785 s, Bob all his seconds.
    assert (a.in_service_s, a.up_s, a.down_s, a.no_data_s) == (820_830, 820_785, 0, 45)
    assert (b.in_service_s, b.up_s, b.down_s, b.no_data_s) == (1_857_570, 1_857_570, 0, 0)
    assert (a.availability, b.availability) == (D("0.999945"), D("1.000000"))

    # Busy: 12:00:20–12:00:30 is Alice's at 80 %, 12:00:30–12:01 Bob's at 80 %, every other
    # up second at 50 %. Alice 50 × 820,775 + 80 × 10 = 41,039,550 %·s = 410,395.5 s,
    # 113.99875 h; Bob 80 × 30 + 50 × 1,857,540 = 92,879,400 %·s = 928,794 s, 257.998333… h.
    assert (a.busy_gpu_hours, b.busy_gpu_hours) == (D("113.998750"), D("257.998333"))
    # Utilization = busy ÷ up: 0.5 + 3 / 820,785 = 0.5000036…; 0.5 + 9 / 1,857,570 = 0.5000048…
    assert (a.utilization, b.utilization) == (D("0.500004"), D("0.500005"))

    # Energy, reckoned per hour to 9 places. Window 11:59 read its counter at 11:59:35: 21 kJ
    # (35/60 of 36 kJ); window 12:00 rose 51 kJ to 12:01 (its 36 and the 15 kJ before it), and
    # is split evenly over its minute, observed or not: 30/60 to each owner.
    # Alice: 227 whole hours × 0.6 kWh = 136.2; hour 11: (59 × 36 + 21) MJ = 2,145 MJ =
    # 0.595833333 kWh; hour 12: 25.5 MJ = 0.007083333 kWh. 136.802916666 kWh.
    # Bob: hour 12: (25.5 + 59 × 36) MJ = 2,149.5 MJ = 0.597083333 kWh; then 515 whole hours
    # × 0.6 = 309.0. 309.597083333 kWh. (The month's 446.4 kWh less two roundings.)
    assert (a.energy_kwh, b.energy_kwh) == (D("136.802917"), D("309.597083"))

    # Money. Rental: 2.00 × 2,678,355 up s ÷ 3600 = 1,487.975 → 1,487.98 (half even); pool
    # 300.00. Exact revenue of each run: pool × its busy ÷ all busy (41,039,550 of
    # 133,918,950) + 2.00 × its up s ÷ 3600: Alice 91.9355… + 455.9916… = 547.9268…, Bob
    # 208.0644… + 1,031.9833… = 1,240.0481…. 1,787.98 split by those: 547.9283… and
    # 1,240.0516…; floors 547.92 + 1,240.05 leave a cent for the larger remainder (Alice).
    assert (a.gross, b.gross) == (D("547.93"), D("1240.05"))
    # Hosting: 100.00 × in-service seconds ÷ 2,678,400 (unobserved seconds are still hosted).
    assert (a.hosting_fee, b.hosting_fee) == (D("30.65"), D("69.35"))
    # Power: kWh × 1.5 × 0.20: 41.0408749…; 92.8791249…
    assert (a.power_cost, b.power_cost) == (D("41.04"), D("92.88"))
    # Management: 10 % of gross: 54.793; 124.005 → 124.00 (half even).
    assert (a.management_fee, b.management_fee) == (D("54.79"), D("124.00"))
    assert (a.net, b.net) == (D("421.45"), D("953.82"))

    # Published, each statement is recomputed from its frozen inputs alone to the same hash.
    s.publish_all(w["period"], oscar, olga)
    for statement in Statement.objects.filter(period=w["period"]):
        assert statement.status == Statement.Status.PUBLISHED
        assert sha256_hex(document_from_frozen(statement.frozen_inputs)) == (
            statement.content_sha256
        )

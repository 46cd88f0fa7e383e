"""Statement scenarios with figures computed by hand, to the cent (rules 1–7).

Every expected amount is derived in the comment above it; none is copied from the output.
"""

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from billing.engine.intervals import Interval
from billing.engine.statement import (
    GpuInputs,
    OwnershipSlice,
    PoolBasis,
    RateTerms,
    Rental,
    cluster_lines,
)
from billing.engine.usage import GpuTimeline, TelemetryMinute

D = Decimal
MARCH = Interval(datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))  # 31 days
FEB = Interval(datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC))  # 28 days
FOREVER = Interval(datetime(2020, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))


def minutes(period, *, state="up", util="50", kwh="0.01", skip=()):
    out, t = [], period.start
    while t < period.end:
        if not any(s.start <= t < s.end for s in skip):
            out.append(TelemetryMinute(t, state, D(util), D(kwh)))
        t += timedelta(minutes=1)
    return out


def terms(**overrides):
    base = RateTerms(
        interval=FOREVER,
        hosting_fee_per_gpu_month=D("100.00"),
        price_per_kwh=D("0.20"),
        pue=D("1.5"),
        management_fee_pct=D("10"),
    )
    return dataclasses.replace(base, **overrides)


def test_transfer_in_the_middle_of_a_minute_splits_at_the_second():
    # Alice owns the whole GPU until 2026-03-10 12:00:30, then Bob. Up all March at 50 %,
    # 0.01 kWh a minute, rented all month at 2.00 per GPU-hour.
    t = datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=minutes(MARCH)),
        ownership=[
            OwnershipSlice(Interval(FOREVER.start, t), {"alice": 10_000}),
            OwnershipSlice(Interval(t, FOREVER.end), {"bob": 10_000}),
        ],
        rentals=[Rental(MARCH, D("2.00"))],
    )
    result = cluster_lines(
        period=MARCH,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms()],
    )
    alice, bob = result.lines
    # Alice's seconds: 9 days 12 h 30 s = 820,830 s; Bob's: 2,678,400 − 820,830 = 1,857,570 s.
    assert (alice.measure.up_s, bob.measure.up_s) == (820_830, 1_857_570)
    # Rentals: 744 h × 2.00 = 1,488.00. Exact shares 456.0166… and 1,031.9833…; floors
    # 456.01 + 1,031.98 leave one cent, which goes to the larger remainder (Alice's .67).
    assert result.revenue[0].rentals == D("1488.00")
    assert (alice.gross, bob.gross) == (D("456.02"), D("1031.98"))
    # Hosting 100.00 × 820,830 / 2,678,400 = 30.6462… → 30.65; Bob 69.3537… → 69.35.
    assert (alice.hosting_fee, bob.hosting_fee) == (D("30.65"), D("69.35"))
    # Energy 0.01 kWh × 13,680.5 min = 136.805 kWh × PUE 1.5 × 0.20 = 41.0415 → 41.04;
    # Bob: 309.595 kWh × 0.3 = 92.8785 → 92.88.
    assert (alice.measure.energy_kwh, bob.measure.energy_kwh) == (D("136.805"), D("309.595"))
    assert (alice.power_cost, bob.power_cost) == (D("41.04"), D("92.88"))
    # Management 10 % of gross: 45.602 → 45.60; 103.198 → 103.20.
    assert (alice.management_fee, bob.management_fee) == (D("45.60"), D("103.20"))
    assert (alice.net, bob.net) == (D("338.73"), D("766.55"))
    assert result.revenue[0].operator_part == D("0.00")


def test_three_way_co_ownership_and_a_pool_split_by_up_seconds():
    # February (28 days = 2,419,200 s). Pool 1,000.00 over two GPUs by up seconds. GPU A is
    # up all month; GPU B's agent goes silent for the second half (1,209,600 s no_data).
    half = Interval(FEB.start + timedelta(days=14), FEB.end)
    gpu_a = GpuInputs(
        key="SN-A",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=minutes(FEB)),
        ownership=[OwnershipSlice(FOREVER, {"x": 3333, "y": 3333, "z": 3333})],
    )
    gpu_b = GpuInputs(
        key="SN-B",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=minutes(FEB, skip=[half])),
        ownership=[OwnershipSlice(FOREVER, {"x": 10_000})],
    )
    result = cluster_lines(
        period=FEB,
        gpus=[gpu_b, gpu_a],
        pool_amount=D("1000.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms()],
    )
    revenue = {r.gpu: r for r in result.revenue}
    # 2 : 1 → 666.666… and 333.333…; floors leave a cent for the larger remainder (A).
    assert (revenue["SN-A"].pool, revenue["SN-B"].pool) == (D("666.67"), D("333.33"))
    # A's 666.67 over 3,333 / 3,333 / 3,333 / operator 1 bps: exact 222.2011… each and
    # 0.0667 for the operator; floors 3 × 222.20 + 0.06 leave a cent → the operator (.67).
    lines_a = [line for line in result.lines if line.gpu == "SN-A"]
    assert [(line.owner, line.gross) for line in lines_a] == [
        ("x", D("222.20")),
        ("y", D("222.20")),
        ("z", D("222.20")),
    ]
    assert revenue["SN-A"].operator_part == D("0.07")
    # B: silent half is no_data and counts against availability: 50 %.
    (line_b,) = [line for line in result.lines if line.gpu == "SN-B"]
    assert (line_b.measure.up_s, line_b.measure.no_data_s) == (1_209_600, 1_209_600)
    assert line_b.measure.availability == Fraction(1, 2)
    # Hosting for a whole 28-day month is the whole fee, whatever the month's length.
    assert line_b.hosting_fee == D("100.00")
    assert sum((line.gross for line in result.lines), D(0)) + sum(
        (r.operator_part for r in result.revenue), D(0)
    ) == D("1000.00")


def test_maintenance_overlapping_an_operator_incident_with_the_hosting_waiver():
    # March, in service all month, telemetry up except down during the incident.
    # Maintenance 10:00–12:00 on the 5th; a hardware incident 11:00–14:00 the same day.
    day = datetime(2026, 3, 5, tzinfo=UTC)
    maintenance = Interval(day + timedelta(hours=10), day + timedelta(hours=12))
    incident = Interval(day + timedelta(hours=11), day + timedelta(hours=14))
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(
            in_service=[FOREVER],
            minutes=minutes(MARCH, skip=[incident]) + minutes(incident, state="down", util="0"),
            maintenance=[maintenance],
            incidents=[incident],
            operator_incidents=[incident],
        ),
        ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})],
        rentals=[Rental(MARCH, D("1.00"))],
    )
    (line,) = cluster_lines(
        period=MARCH,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms(waive_hosting_in_operator_incidents=True)],
    ).lines
    m = line.measure
    # Maintenance wins 10–12 (2 h); down is what is left of the incident, 12–14 (2 h).
    assert (m.maintenance_s, m.down_s, m.no_data_s) == (7200, 7200, 0)
    assert m.up_s == 2_678_400 - 4 * 3600
    # Availability = up / (in-service − maintenance) = 2,664,000 / 2,671,200.
    assert m.availability == Fraction(2_664_000, 2_671_200)
    # Rental earns on up seconds only: 740 h × 1.00.
    assert line.gross == D("740.00")
    # Hosting waived for the incident's 3 h (maintenance overlap included):
    # 100 × (2,678,400 − 10,800) / 2,678,400 = 99.5967… → 99.60.
    assert line.hosting_fee == D("99.60")


def test_agent_silent_for_six_hours_is_no_data_not_down():
    silent = Interval(datetime(2026, 3, 20, 3, tzinfo=UTC), datetime(2026, 3, 20, 9, tzinfo=UTC))
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=minutes(MARCH, skip=[silent])),
        ownership=[OwnershipSlice(FOREVER, {"bob": 5000})],
        rentals=[Rental(MARCH, D("3.00"))],
    )
    result = cluster_lines(
        period=MARCH,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms()],
    )
    (line,) = result.lines
    assert (line.measure.no_data_s, line.measure.down_s) == (21_600, 0)
    # 738 up hours × 3.00 = 2,214.00, half to Bob, half to the operator.
    assert result.revenue[0].rentals == D("2214.00")
    assert (line.gross, result.revenue[0].operator_part) == (D("1107.00"), D("1107.00"))
    # Hosting: 100 × share 0.5 for the whole in-service month = 50.00 (silence is still
    # in service). Power: 0.01 × 44,280 min = 442.8 kWh × 1.5 × 0.20 × 0.5 = 66.42.
    assert (line.hosting_fee, line.power_cost) == (D("50.00"), D("66.42"))


@pytest.mark.parametrize(("period", "days"), [(FEB, 28), (MARCH, 31)])
def test_hosting_is_prorated_by_the_seconds_of_the_month(period, days):
    # In service for the last 7 days only: 100 × 7 / days.
    start = period.end - timedelta(days=7)
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[Interval(start, FOREVER.end)], minutes=[]),
        ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})],
    )
    (line,) = cluster_lines(
        period=period,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms()],
    ).lines
    expected = {28: D("25.00"), 31: D("22.58")}[days]  # 700/28 = 25; 700/31 = 22.580…
    assert line.hosting_fee == expected
    assert line.measure.no_data_s == 7 * 86400


def test_a_rate_card_change_mid_month_slices_the_costs():
    t = datetime(2026, 3, 16, tzinfo=UTC)  # 15 days of 31 at the old card
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=minutes(MARCH)),
        ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})],
    )
    (line,) = cluster_lines(
        period=MARCH,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[
            terms(interval=Interval(FOREVER.start, t)),
            terms(interval=Interval(t, FOREVER.end), hosting_fee_per_gpu_month=D("124.00")),
        ],
    ).lines
    # 100 × 15/31 + 124 × 16/31 = 48.387… + 64 = 112.387… → 112.39.
    assert line.hosting_fee == D("112.39")


def test_missing_rate_card_is_an_error_not_a_zero():
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[FOREVER], minutes=[]),
        ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})],
    )
    match = "no rate card is in force from 2026-03-02 00:00:00 UTC to 2026-04-01 00:00:00 UTC"
    with pytest.raises(ValueError, match=match):
        cluster_lines(
            period=MARCH,
            gpus=[gpu],
            pool_amount=D("0.00"),
            pool_basis=PoolBasis.UP_SECONDS,
            rates=[terms(interval=Interval(FOREVER.start, datetime(2026, 3, 2, tzinfo=UTC)))],
        )


def test_no_rate_card_is_needed_where_there_is_nothing_to_charge():
    """A GPU owned all month but in service in the cluster only from the 10th, when the
    cluster's first card starts: the days before charge nothing, so they need no card."""
    opened = datetime(2026, 3, 10, tzinfo=UTC)
    gpu = GpuInputs(
        key="SN-1",
        timeline=GpuTimeline(in_service=[Interval(opened, FOREVER.end)], minutes=[]),
        ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})],
    )
    (line,) = cluster_lines(
        period=MARCH,
        gpus=[gpu],
        pool_amount=D("0.00"),
        pool_basis=PoolBasis.UP_SECONDS,
        rates=[terms(interval=Interval(opened, FOREVER.end))],
    ).lines
    # 100.00 × 22 of 31 days in service = 70.967… → 70.97.
    assert (line.measure.in_service_s, line.hosting_fee) == (22 * 86_400, D("70.97"))

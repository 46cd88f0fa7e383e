"""Hosting during `down` time that no incident covers: a rate-card setting, charged unless the
card waives it (docs/accounting.md rule 6; issue 19, part 6d). The statements verify."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D

import pytest

from accounts.models import Owner
from fleet.models import Incident, IncidentCause, MaintenanceWindow
from tests.billing import scenario as s
from tests.verify import world as w
from tests.verify.test_verify import assert_verifies

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
DAY5 = dt.datetime(2026, 3, 5, tzinfo=UTC)
DAY6 = dt.datetime(2026, 3, 6, tzinfo=UTC)


def _world(oscar, **card) -> Owner:
    """SN-1, Alice's all March. Telemetry says down 02:00–04:00 on the 5th (no incident)
    and in the first 30 s of 04:00 (the rest of that minute unobserved), during an
    operator-caused incident 11:00–14:00, and during maintenance 10:00–11:00 on the 6th."""
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar, **card)
    down = [
        (DAY5 + dt.timedelta(hours=2), DAY5 + dt.timedelta(hours=4)),
        (DAY5 + dt.timedelta(hours=11), DAY5 + dt.timedelta(hours=14)),
        (DAY6 + dt.timedelta(hours=10), DAY6 + dt.timedelta(hours=11)),
    ]

    def change(t, v):
        if any(a <= t < b for a, b in down):
            v.update(state="down", util=0.0)
        if t == DAY5 + dt.timedelta(hours=4):
            v.update(state="down", util=0.0, observed=(0, 30))
        return v

    s.windows(gpu, MARCH[0] - dt.timedelta(minutes=1), MARCH[1], node=f.node, change=change)
    s.rebuild(*MARCH)
    Incident.objects.create(
        gpu=gpu,
        title="PSU",
        cause=IncidentCause.HARDWARE,
        started_at=down[1][0],
        ended_at=down[1][1],
    )
    MaintenanceWindow.objects.create(
        node=f.node, title="BIOS", announced_at=DAY5, starts_at=down[2][0], ends_at=down[2][1]
    )
    return alice


# March: 2,678,400 s, all in service. Down with no incident: 2 h + 30 s = 7,230 s; the
# incident's 3 h = 10,800 s; the maintenance hour is maintenance, not down. Hosting is
# 100.00 × charged seconds ÷ 2,678,400, rounded once, half to even.
@pytest.mark.parametrize(
    ("card", "hosting"),
    [
        # the default: every in-service second charged → 100.00
        ({}, D("100.00")),
        # − 7,230 → 2,671,170 s: 99.730062… → 99.73
        ({"waive_hosting_when_down": True}, D("99.73")),
        # − 10,800 → 2,667,600 s: 99.596774… → 99.60
        ({"waive_hosting_in_operator_incidents": True}, D("99.60")),
        # − 18,030 → 2,660,370 s: 99.326836… → 99.33
        (
            {"waive_hosting_when_down": True, "waive_hosting_in_operator_incidents": True},
            D("99.33"),
        ),
    ],
    ids=["charged-by-default", "down-waived", "incidents-waived", "both-waived"],
)
def test_down_time_without_an_incident_is_charged_unless_the_card_waives_it(
    oscar, olga, disclosure, card, hosting
):
    alice = _world(oscar, **card)
    (statement,) = w.published(2026, 3, oscar, olga)
    assert statement.owner_id == alice.pk
    (line,) = statement.lines.all()
    assert (line.maintenance_s, line.down_s, line.no_data_s) == (3600, 7_230 + 10_800, 30)
    assert line.hosting_fee == hosting
    export = assert_verifies(statement)
    (gpu_line,) = [x for x in export["lines"] if x["kind"] == "gpu"]
    (terms,) = gpu_line["terms"]["rate_cards"]
    waives_down = card.get("waive_hosting_when_down", False)
    assert (terms["waives_down"], terms["waived_down_s"]) == (
        waives_down,
        7_230 if waives_down else 0,
    )

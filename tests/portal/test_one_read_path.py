"""One read path: for a closed and published month, the portal and the API show every GPU's
figures exactly as its line on the owner's statement shows them.

October 2026 on cluster a of ``tests.billing.scenario``'s fleet, closed and published:

* SN-1: alice's until 2026-10-10 12:00:30, then bob's (a transfer at a second, inside a
  minute whose agent restarted: its last window observed 0–35 s, the next 20–60 s); up all
  month at 50 %, rented all month at 2.00 EUR a GPU-hour.
* SN-2: alice's all month; silent Oct 15 06:00 – Oct 16 09:30 (no windows: the counter goes
  on climbing, so the first window after carries the energy of the silence); telemetry
  down Oct 20 10:00–11:00; a hardware incident Oct 25 08:00 – 09:15:20.
* SN-3: alice's all month; moved from cluster a to cluster b, off cluster a at Oct 18
  14:20:10 and placed in b at 14:30:10 (ten minutes on no node: on no statement line); up
  all month at 30 %. Its statement has a line per cluster; the portal and the API show
  their sum.
* Maintenance on cluster a Oct 12 02:00–04:00.

Every GPU's lines are compared field by field — seconds up, down, in maintenance and with
no data, in service, availability, utilization, busy GPU-hours, energy, the share and the
span covered — with the portal's GPU list (page and CSV), its overview (the sums of the
lines) and the API's monthly series point and ownership rows. A GPU with one line shows its
line's figures; one with two shows their sums (seconds, energy as printed), with availability
and utilization worked out from the summed seconds.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import pytest
import time_machine
from django.test import Client
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.models import ApiScope, Membership, Owner, User
from billing.models import Statement, StatementLine
from billing.services.closing import period_close
from billing.services.periods import period_for_month
from billing.services.revenue import rental_create
from fleet.models import Cluster, Gpu, IncidentCause, Node, Placement
from fleet.services import operations
from portal import selectors
from tests.billing import scenario as s
from tests.conftest import PASSWORD
from tests.portal.test_pages import rows_of

pytestmark = pytest.mark.django_db

UTC = dt.UTC
OCT = dt.datetime(2026, 10, 1, tzinfo=UTC)
NOV = dt.datetime(2026, 11, 1, tzinfo=UTC)
NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
TRANSFER = dt.datetime(2026, 10, 10, 12, 0, 30, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)


def _oct(day: int, hour: int = 0, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 10, day, hour, minute, second, tzinfo=UTC)


def _restart_at_transfer(t: dt.datetime, values: dict[str, Any]) -> dict[str, Any]:
    if t == _oct(10, 11, 59):
        return {**values, "observed": (0, 35), "energy_mj": values["energy_mj"] - 15_000_000}
    if t == _oct(10, 12, 0):
        return {**values, "observed": (20, 60), "util": 80.0}
    return values


def _down_for_an_hour(t: dt.datetime, values: dict[str, Any]) -> dict[str, Any]:
    if _oct(20, 10) <= t < _oct(20, 11):
        return {**values, "state": "down", "util": None}
    return values


def _member(email: str, owner: Owner) -> User:
    user = accounts.user_create(email=email, password=PASSWORD)
    accounts.membership_grant(user=user, owner=owner, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def october(oscar: User) -> dict[str, Any]:
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    accounts.disclosure_standard_ensure()
    f = s.fleet()
    sn1 = s.gpu(f, "SN-1", slot=0)
    sn2 = s.gpu(f, "SN-2", slot=1)
    alice_owner, bob_owner = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    alice, bob = (
        _member("alice@owner.example", alice_owner),
        _member("bob@owner.example", bob_owner),
    )
    s.own(sn1, alice_owner, 10_000, s.EPOCH, TRANSFER)
    s.own(sn1, bob_owner, 10_000, TRANSFER)
    s.own(sn2, alice_owner, 10_000, s.EPOCH)
    s.card(f, oscar)
    cluster_b = Cluster.objects.create(site=f.site, code="b", name="B")
    node_b = Node.objects.create(cluster=cluster_b, hostname="fra1-b-n01")
    s.card(s.Fleet(f.site, cluster_b, node_b, f.model), oscar, cluster=cluster_b)
    sn3 = s.gpu(f, "SN-3", slot=2)
    s.own(sn3, alice_owner, 10_000, s.EPOCH)
    Placement.objects.filter(gpu=sn3).update(valid_to=_oct(18, 14, 20, 10))
    Placement.objects.create(gpu=sn3, node=node_b, slot=0, valid_from=_oct(18, 14, 30, 10))
    s.windows(sn3, OCT - MINUTE, NOV, node=f.node, util=30.0)
    s.windows(sn1, OCT - MINUTE, NOV, node=f.node, change=_restart_at_transfer)
    s.windows(
        sn2,
        OCT - MINUTE,
        NOV,
        node=f.node,
        util=70.0,
        skip=[(_oct(15, 6), _oct(16, 9, 30))],
        change=_down_for_an_hour,
    )
    s.rebuild(OCT, NOV)
    operations.maintenance_schedule(
        scope=f.cluster,
        title="PDU firmware update",
        announced_at=_oct(1, 9),
        starts_at=_oct(12, 2),
        ends_at=_oct(12, 4),
        by=oscar,
    )
    incident = operations.incident_open(
        scope=sn2,
        title="SN-2 falls off the bus",
        cause=IncidentCause.HARDWARE,
        started_at=_oct(25, 8),
        by=oscar,
    )
    operations.incident_close(incident=incident, ended_at=_oct(25, 9, 15, 20), by=oscar)
    rental_create(
        cluster=f.cluster,
        gpus=[sn1],
        starts_at=OCT,
        ends_at=NOV,
        rate_per_gpu_hour=Decimal("2.00"),
        currency="EUR",
        customer_reference="R-1",
        by=oscar,
    )
    period = period_for_month(year=2026, month=10)
    with time_machine.travel(NOW, tick=False):
        period_close(period=period, by=oscar)
        s.publish_all(period, oscar, olga)
    return {"sn1": sn1, "sn2": sn2, "sn3": sn3, "alice": alice, "bob": bob, "period": period}


def _lines(user: User) -> dict[Gpu, list[StatementLine]]:
    owner_ids = Membership.objects.filter(user=user).values("owner_id")
    lines = (
        StatementLine.objects.filter(
            statement__owner_id__in=owner_ids,
            statement__status=Statement.Status.PUBLISHED,
            kind=StatementLine.Kind.GPU,
        )
        .select_related("gpu")
        .order_by("starts_at")
    )
    by_gpu: dict[Gpu, list[StatementLine]] = {}
    for line in lines:
        assert line.gpu is not None
        by_gpu.setdefault(line.gpu, []).append(line)
    return by_gpu


FIELDS = ("in_service_s", "up_s", "down_s", "maintenance_s", "no_data_s")
SIX = Decimal("0.000001")


def _ratio(numerator: Decimal | int, denominator: int) -> Decimal | None:
    if not denominator:
        return None
    return (Decimal(numerator) / denominator).quantize(SIX, rounding=ROUND_HALF_EVEN)


def _line_figures(lines: list[StatementLine]) -> tuple[Any, ...]:
    """What the lines show for the GPU: one line as printed, several summed."""
    sums = [sum(getattr(li, name) for li in lines) for name in FIELDS]
    if len(lines) == 1:
        (line,) = lines
        availability, utilization = line.availability, line.utilization
    else:
        # The lines' seconds summed, and the busy hours from them (as printed, 6 places):
        # the ratios an owner works out from the lines.
        in_service, up, _, maintenance, _ = sums
        availability = _ratio(up, in_service - maintenance)
        busy_s = sum(li.busy_gpu_hours for li in lines) * 3600
        utilization = _ratio(busy_s, up) if up else None
    return (*sums, availability, utilization, sum(li.energy_kwh for li in lines))


def test_the_scenario_has_every_state_on_its_lines(october):
    """The month is what the test means it to be: each kind of second is on some line."""
    alice, bob = _lines(october["alice"]), _lines(october["bob"])
    (sn1_alice,), (sn2,), (sn1_bob,) = (
        alice[october["sn1"]],
        alice[october["sn2"]],
        bob[october["sn1"]],
    )
    assert (sn1_alice.starts_at, sn1_alice.ends_at) == (OCT, TRANSFER)
    assert (sn1_bob.starts_at, sn1_bob.ends_at) == (TRANSFER, NOV)
    assert sn2.maintenance_s == 2 * 3600
    # An hour of telemetry down and 1 h 15 min 20 s of incident.
    assert sn2.down_s == 3600 + 75 * 60 + 20
    # The silence, 27.5 h; the 45 s the restarting agent did not observe (11:59:35 –
    # 12:00:20) are alice's, before the transfer at 12:00:30.
    assert sn2.no_data_s == 27 * 3600 + 30 * 60
    assert (sn1_alice.no_data_s, sn1_bob.no_data_s) == (45, 0)
    # SN-3: a line per cluster, the ten minutes between them on neither.
    in_a, in_b = sorted(alice[october["sn3"]], key=lambda li: -li.in_service_s)
    assert (in_a.in_service_s, in_b.in_service_s) == (
        int((_oct(18, 14, 20, 10) - OCT).total_seconds()),
        int((NOV - _oct(18, 14, 30, 10)).total_seconds()),
    )
    assert (in_a.maintenance_s, in_b.maintenance_s) == (2 * 3600, 0)  # cluster a's window
    assert in_a.up_s + in_b.up_s == 31 * 86400 - 600 - 2 * 3600


def test_the_portal_gpu_list_shows_each_gpu_as_its_statement_line(client: Client, october):
    for user in (october["alice"], october["bob"]):
        lines = _lines(user)
        period = selectors.month_period(now=NOW, key="2026-10")
        rows = selectors.gpu_rows(
            user=user, filters=selectors.GpuFilters(held="ever"), period=period, now=NOW
        )
        assert {r.gpu for r in rows} == set(lines)
        for row in rows:
            f = row.figures
            shown = (
                *(getattr(f, name) for name in FIELDS),
                f.availability,
                f.utilization,
                f.energy_kwh,
            )
            assert shown == _line_figures(lines[row.gpu]), row.gpu.serial
        # The page's CSV: the same values, as the statement's CSV writes them.
        client.force_login(user)
        with time_machine.travel(NOW, tick=False):
            csv_rows = rows_of(client.get("/gpus/?held=ever&period=2026-10&export=gpus"))
        header = csv_rows[0]
        assert len(csv_rows) == 1 + len(lines)
        for cells in csv_rows[1:]:
            gpu_lines = next(li for g, li in lines.items() if g.serial == cells[0])
            _, _, _, _, _, availability, utilization, energy = _line_figures(gpu_lines)
            printed = [
                cells[header.index(n)] for n in ("availability", "utilization", "energy_kwh")
            ]
            assert printed == [str(availability), str(utilization), str(energy)], cells[0]


def test_the_portal_overview_sums_the_statement_lines(client: Client, october):
    alice = october["alice"]
    lines = [li for gpu_lines in _lines(alice).values() for li in gpu_lines]
    period = selectors.month_period(now=NOW, key="2026-10")
    overview = selectors.fleet_overview(user=alice, period=period, now=NOW)
    sums = {name: sum(getattr(li, name) for li in lines) for name in FIELDS}
    assert {name: getattr(overview.figures, name) for name in FIELDS} == sums
    assert overview.figures.energy_kwh == sum(li.energy_kwh for li in lines)
    availability = Decimal(sums["up_s"]) / (sums["in_service_s"] - sums["maintenance_s"])
    assert overview.figures.availability == availability.quantize(Decimal("0.000001"))
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        page = client.get("/?period=2026-10").content.decode()
    hours = (Decimal(sums["no_data_s"]) / 3600).quantize(Decimal("0.1"))
    assert f'<span class="value">{hours}</span>' in page


def test_the_api_monthly_series_shows_each_gpu_as_its_statement_line(october):
    for user, owner_key in ((october["alice"], "alice"), (october["bob"], "bob")):
        owner = Membership.objects.get(user=user).owner
        _, token = accounts.api_key_create(
            name=f"{owner_key} figures",
            scopes=[ApiScope.FLEET_READ, ApiScope.TELEMETRY_READ],
            expires_at=NOW + dt.timedelta(days=30),
            by=user,
            owner=owner,
        )
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        for gpu, lines in _lines(user).items():
            with time_machine.travel(NOW, tick=False):
                response = api.get(
                    f"/api/v1/gpus/{gpu.pk}/series",
                    {"start": OCT.isoformat(), "end": NOV.isoformat(), "step": "month"},
                )
                rows = api.get(f"/api/v1/gpus/{gpu.pk}/ownership")
            assert response.status_code == 200, response.content
            (point,) = json.loads(response.content, parse_float=Decimal)["points"]
            shown = (
                *(point[name] for name in FIELDS),
                Decimal(str(point["availability"])),
                Decimal(str(point["utilization"])),
                Decimal(str(point["energy_kwh"])),
            )
            assert shown == _line_figures(lines), gpu.serial
            assert Decimal(str(point["busy_gpu_hours"])) == sum(li.busy_gpu_hours for li in lines)
            # The share and its span, as the lines have them.
            (held,) = rows.json()["results"]
            for line in lines:
                assert line.starts_at is not None and line.ends_at is not None
                assert held["share_bps"] == line.share_bps
                assert dt.datetime.fromisoformat(held["valid_from"]) <= line.starts_at
                ends = held["valid_to"] and dt.datetime.fromisoformat(held["valid_to"])
                assert ends is None or ends >= line.ends_at
            # Held: from the holding's start (or Oct 1) to its end (or Nov 1), whether or
            # not the GPU was placed (held_s counts holding, in_service_s what is counted).
            held_from = max(OCT, dt.datetime.fromisoformat(held["valid_from"]))
            held_to = min(NOV, ends) if ends else NOV
            assert point["held_s"] == (held_to - held_from).total_seconds()


def test_a_month_step_refuses_a_range_off_the_month(october):
    user = october["alice"]
    owner = Membership.objects.get(user=user).owner
    _, token = accounts.api_key_create(
        name="off",
        scopes=[ApiScope.TELEMETRY_READ],
        expires_at=NOW + dt.timedelta(days=30),
        by=user,
        owner=owner,
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    with time_machine.travel(NOW, tick=False):
        response = api.get(
            f"/api/v1/gpus/{october['sn2'].pk}/series",
            {"start": "2026-10-02T00:00:00Z", "end": "2026-11-01T00:00:00Z", "step": "month"},
        )
    assert response.status_code == 400
    assert "first second of a month" in response.content.decode()


def test_at_the_first_second_of_a_month_nothing_is_counted_yet(client: Client, october):
    alice = october["alice"]
    period = selectors.month_period(now=NOV, key="2026-11")
    assert period.start == period.end == NOV
    overview = selectors.fleet_overview(user=alice, period=period, now=NOV)
    assert (overview.figures.in_service_s, overview.figures.availability) == (0, None)
    client.force_login(alice)
    with time_machine.travel(NOV, tick=False):
        assert client.get("/").status_code == 200

"""The pages' figures, filters, sorting, pagination and CSV exports, asserted exactly."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts import services as accounts
from billing.engine.intervals import Interval
from fleet.models import Gpu, GpuModel
from fleet.services import ownership
from portal import selectors
from portal.selectors import seconds_per_hour
from tests.portal.world import NOV, NOW, at

pytestmark = pytest.mark.django_db


def text(response) -> str:
    import re

    body = response.content.decode()
    body = re.sub(r"<svg.*?</svg>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def rows_of(response) -> list[list[str]]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(body)))


def test_seconds_per_hour_splits_at_hour_boundaries():
    got = seconds_per_hour([Interval(at(1, 0).replace(minute=30), at(1, 2).replace(minute=15))])
    assert got == {at(1, 0): 1800, at(1, 1): 3600, at(1, 2): 900}


def test_overview_figures_follow_the_accounting_precedence(client, world, alice):
    """alice in November: A1 482 h up, 2 down, 6 no data, 2 maintenance; A2 26 h down
    (the open incident), 2 maintenance, 464 no data; X until Nov 10 (216 h, no data)."""
    overview = selectors.fleet_overview(user=alice, period=selectors.month_period(now=NOW), now=NOW)
    m = overview.figures.measure
    assert (m.in_service_s, m.maintenance_s, m.down_s, m.up_s, m.no_data_s, m.busy_s) == (
        1200 * 3600,
        4 * 3600,
        28 * 3600,
        482 * 3600,
        686 * 3600,
        Decimal(482 * 3600) / 2,
    )
    client.force_login(alice)
    page = text(client.get("/"))
    assert "Availability 40.30 %" in page
    assert "Utilization 50.00 %" in page
    assert "Hours up 482.0" in page
    assert "Hours with no data 686.0" in page
    assert "2 GPUs held now" in page
    assert "A2 falls off the bus" in page


def test_an_earlier_month_can_be_chosen(client, world, alice):
    client.force_login(alice)
    page = text(client.get("/?period=2026-10"))
    # October: A1's telemetry begins on Oct 22 (its rollups), so it is up 240 h and no data
    # before, whatever its Oct 1 transition says; A2 and X silent all month: 240 / 2,232 h.
    assert "October 2026 " in page and "month to date" not in page.split("Show")[1][:40]
    assert "Hours up 240.0" in page
    assert "Availability 10.75 %" in page


def test_gpu_list_filters_sorts_and_exports(client, world, alice, oscar):
    client.force_login(alice)
    page = text(client.get("/gpus/"))
    assert "2 GPUs match" in page
    response = client.get("/gpus/?held=ever&sort=-availability")
    serials = [r[0] for r in rows_of(client.get("/gpus/?held=ever&sort=-availability&export=gpus"))]
    assert serials == ["serial", "A1", "A2", "X"]
    rows = rows_of(client.get("/gpus/?held=ever&sort=availability&export=gpus"))
    assert [r[0] for r in rows] == ["serial", "A2", "X", "A1"]
    assert rows[0] == [
        "serial",
        "model",
        "cluster",
        "node",
        "slot",
        "lifecycle",
        "telemetry_now",
        "telemetry_last_seen",
        "your_share_bps",
        "availability",
        "utilization",
        "hours_no_data",
        "energy_kwh",
    ]
    assert rows[3] == [
        "A1",
        "NVIDIA H100 80GB HBM3",
        "fra1/a",
        "fra1-a-n01",
        "0",
        "in_service",
        "up",
        "2026-11-21T12:00:00Z",
        "10000",
        "0.983673",
        "0.500000",
        "6.0",
        "338.800000",  # 484 hours of rollups with 0.7 kWh (maintenance hours too)
    ]
    # X was sold: held now 0 bps, and its figures stop on Nov 10.
    assert rows[2][6:9] == ["no_data", "", "0"] and rows[2][11] == "216.0"
    assert response.status_code == 200
    only_up = rows_of(client.get("/gpus/?telemetry=up&export=gpus"))
    assert [r[0] for r in only_up] == ["serial", "A1"]
    assert [r[0] for r in rows_of(client.get("/gpus/?cluster=fra1/a&export=gpus"))] == [
        "serial",
        "A1",
        "A2",
    ]
    foreign = client.get("/gpus/?cluster=fra1/b&lifecycle=retired")
    assert "Select a valid choice. fra1/b is not one of the available choices." in text(foreign)
    assert "0 GPUs match" in text(foreign)  # the valid filter still applies
    model = GpuModel.objects.get()
    assert len(rows_of(client.get(f"/gpus/?model={model.pk}&export=gpus"))) == 3


def test_gpu_list_paginates_25_a_page(client, world, alice, alice_owner, oscar):
    from fleet.services import importing, lifecycle

    lines = ["serial,nvml_uuid,model,received_at"]
    lines += [
        f"P{n:02d},GPU-p{n:02d},NVIDIA H100 80GB HBM3,2026-09-01T08:00:00Z" for n in range(30)
    ]
    gpus = importing.gpu_import_commit(text="\n".join(lines) + "\n", by=oscar, reason="more")
    lifecycle.gpus_transition(gpus=gpus, state="burn_in", at=at(2, month=9), by=oscar, reason="r")
    ownership.ownership_sell(
        gpus=gpus, owner=alice_owner, share_bps=10_000, at=at(3, month=9), reason="o", by=oscar
    )
    client.force_login(alice)
    first = text(client.get("/gpus/"))
    assert "32 GPUs match" in first and "Page 1 of 2" in first
    second = client.get("/gpus/?page=2")
    assert "Page 2 of 2" in text(second)
    assert second.content.decode().count('<th scope="row">') == 7
    assert len(rows_of(client.get("/gpus/?page=2&export=gpus"))) == 33  # every row, not a page


def test_gpu_page_shows_identity_history_timeline_and_charts(client, world, alice):
    client.force_login(alice)
    response = client.get(reverse("portal:gpu", args=[world.a1.pk]))
    body = response.content.decode()
    page = text(response)
    assert "GPU-a1-0000" in page and "NVIDIA H100 80GB HBM3" in page
    assert "fra1-a-n01" in page and "Alice Compute Ltd" in page and "100.00 %" in page
    assert body.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart') == 4
    assert 'aria-labelledby="timeline-title timeline-desc"' in body
    assert '<title id="chart-util-title">GPU utilization, hourly mean (%)</title>' in body
    assert "Down: 05 Nov 10:00 – 05 Nov 12:00 UTC" in body
    assert "Maintenance: 12 Nov 02:00 – 12 Nov 04:00 UTC" in body
    assert "No data: 08 Nov 00:00 – 08 Nov 06:00 UTC" in body
    assert "PDU firmware update" in page
    # The by-day table: Nov 5 had 2 hours down, 22 up, 50 % busy, 65 °C; power is the mean
    # of its hours, 22 at 700 W and the 2 down ones at 0 W (no energy): 641.7 W.
    assert "Thu 05 Nov 2026 22.0 2.0 0.0 0.0 50.0 % 641.7 65.0" in page
    # Its telemetry covers up to now (the rollups' last hour ends at 12:00).
    assert "Telemetry now Up since 2026-11-08 06:00:00 UTC" in page
    assert "Telemetry last seen 2026-11-21 12:00:00 UTC" in page


def test_gpu_page_of_a_sold_gpu_names_no_other_owner_and_stops_at_the_sale(
    client, world, alice, bob
):
    client.force_login(alice)
    page = text(client.get(reverse("portal:gpu", args=[world.x.pk])))
    assert "Bob Chen" not in page
    assert "Another owner" in page and "Alice Compute Ltd" in page
    assert "Your share now 0.00 %" in page
    hours = rows_of(client.get(reverse("portal:gpu", args=[world.x.pk]) + "?export=hours"))
    states = {row[0]: row[1] for row in hours[1:]}
    assert states["2026-11-09T23:00:00Z"] == "no_data"
    assert states["2026-11-10T00:00:00Z"] == "not_counted"
    client.force_login(bob)
    page = text(client.get(reverse("portal:gpu", args=[world.x.pk])))
    assert "Bob Chen" in page and "Alice Compute Ltd" not in page


def test_incident_pages_show_owner_notes_never_internal_ones(client, world, bob):
    client.force_login(bob)
    page = text(client.get(reverse("portal:incident", args=[world.node_incident.pk])))
    assert "A chassis fan failed and was replaced." in page
    assert "SECRET-INTERNAL" not in page
    assert "B1" in page and "Node fra1-b-n01" in page and "Duration 1.0 h" in page
    exported = b"".join(client.get("/incidents/?export=incidents").streaming_content).decode()
    assert "SECRET-INTERNAL" not in exported
    assert rows_of(client.get("/incidents/?export=incidents"))[1] == [
        "Fan failure on fra1-b-n01",
        "cooling",
        "Node fra1-b-n01",
        "2026-11-15T08:00:00Z",
        "2026-11-15T09:00:00Z",
        "1.0",
        "resolved",
    ]


def test_incident_and_maintenance_lists_filter(client, world, alice):
    client.force_login(alice)
    assert "A2 falls off the bus" in text(client.get("/incidents/?status=open"))
    assert "A2 falls off the bus" not in text(client.get("/incidents/?status=resolved"))
    assert "PDU firmware update" in text(client.get("/maintenance/?when=past"))
    assert "PDU firmware update" not in text(client.get("/maintenance/?when=upcoming"))
    page = text(client.get(reverse("portal:maintenance-window", args=[world.maintenance.pk])))
    assert "Completed" in page and "A1" in page and "A2" in page and ">X<" not in page


def test_a_maintenance_window_announced_later_is_not_shown_yet(client, world, alice, oscar):
    from fleet.models import Cluster
    from fleet.services import operations

    operations.maintenance_schedule(
        scope=Cluster.objects.get(code="a"),
        title="Secret future work",
        announced_at=at(25),
        starts_at=at(28),
        ends_at=at(28, 2),
        by=oscar,
    )
    client.force_login(alice)
    assert "Secret future work" not in text(client.get("/maintenance/"))


def test_csv_cells_cannot_smuggle_formulas(client, world, bob, oscar):
    from fleet.models import Node
    from fleet.services import operations

    operations.incident_open(
        scope=Node.objects.get(hostname="fra1-b-n01"),
        title='=HYPERLINK("http://x")',
        cause="power",
        started_at=at(21, 1),
        by=oscar,
    )
    client.force_login(bob)
    rows = rows_of(client.get("/incidents/?export=incidents"))
    assert rows[1][0] == '\'=HYPERLINK("http://x")'


def test_figures_query_count_does_not_grow_with_gpus(django_assert_max_num_queries, world, alice):
    gpus = list(Gpu.objects.all())
    with django_assert_max_num_queries(16):
        selectors.held_figures(user=alice, gpu_ids=[g.pk for g in gpus], window=Interval(NOV, NOW))


def test_the_notification_settings_are_per_user(client, world, alice, alice_owner):
    other = accounts.user_create(email="ann@owner.example", password="x" * 16)
    client.force_login(alice)
    response = client.post(
        "/settings/notifications/",
        {"gpu_down": "on", "gpu_down_after_minutes": "90", "maintenance": "on"},
    )
    assert response.status_code == 302
    from portal.models import NotificationPreference

    pref = NotificationPreference.objects.get(user=alice)
    assert (pref.gpu_down, pref.gpu_down_after_minutes, pref.incidents, pref.maintenance) == (
        True,
        90,
        False,
        True,
    )
    assert pref.statement_published is False
    assert not NotificationPreference.objects.filter(user=other).exists()
    bad = client.post("/settings/notifications/", {"gpu_down": "on", "gpu_down_after_minutes": "2"})
    assert bad.status_code == 200
    assert "Ensure this value is greater than or equal to 5." in bad.content.decode()

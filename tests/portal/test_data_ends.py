"""Nothing outlives its data: a GPU is never shown up beyond the last second its telemetry
covers (its last window's ``window_start + observed_to``); later time is no_data until windows
arrive, whatever its newest transition says and whether or not the staleness sweep has run.

Three more GPUs of alice's, on a node of their own (no maintenance or incident touches it),
in service since Sep 5; now is Nov 21 12:00:

* W1 sent windows only in October, the last at Oct 31 23:30 (a backfill that has not reached
  November yet): its last transition is ``up`` (Oct 31 20:00), no no_data after it.
* W2's telemetry ended 10 minutes ago: windows Nov 21 10:00–11:49, nothing since.
* W3's agent started at 11:00:20 and its last window (11:58) was observed only 0–35 s: the
  telemetry covers up to 11:58:35, less than the freshness allowance (3 windows) before now.

Transitions are written as the derived pass dates them (a state at ``ws + observed_from``).
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from billing.engine.intervals import Interval
from fleet.models import Cluster, Gpu, Node
from fleet.services import importing, lifecycle, ownership
from portal import selectors
from portal.selectors import Figures
from telemetry.models import GpuStateTransition
from telemetry.selectors import StateNow, gpu_states_now, gpu_telemetry_runs
from telemetry.services.derived import rollups_rebuild
from tests.billing import scenario as s
from tests.portal.test_pages import rows_of, text
from tests.portal.world import H100, NOV, NOW, at

pytestmark = pytest.mark.django_db

MINUTE = dt.timedelta(minutes=1)
OCT = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
SERVICE_NOV_S = int((NOW - NOV).total_seconds())  # 492 h of November so far


@pytest.fixture
def gpus(world, oscar, alice_owner) -> dict[str, Gpu]:
    cluster = Cluster.objects.get(code="b")
    node = Node.objects.create(cluster=cluster, hostname="fra1-b-n02")
    lines = ["serial,nvml_uuid,model,node,slot,received_at"]
    lines += [f"{n},GPU-{n.lower()}-0000,{H100},fra1-b-n02,{i},2026-09-01T08:00:00Z" for i, n in
              enumerate(["W1", "W2", "W3"])]  # fmt: skip
    made = importing.gpu_import_commit(text="\n".join(lines) + "\n", by=oscar, reason="t")
    lifecycle.gpus_transition(gpus=made, state="burn_in", at=at(2, month=9), by=oscar, reason="r")
    lifecycle.gpus_transition(
        gpus=made, state="in_service", at=at(5, month=9), by=oscar, reason="ok"
    )
    ownership.ownership_sell(
        gpus=made, owner=alice_owner, share_bps=10_000, at=at(5, month=9), reason="o", by=oscar
    )
    w = {g.serial: g for g in made}
    s.windows(w["W1"], at(31, 20, month=10), at(31, 23, month=10) + 31 * MINUTE, node=node)
    s.windows(w["W2"], at(21, 10), at(21, 11) + 50 * MINUTE, node=node)
    s.windows(
        w["W3"],
        at(21, 11),
        at(21, 11) + 59 * MINUTE,
        node=node,
        change=lambda t, v: {
            **v,
            "observed": (20, 60) if t == at(21, 11) else (0, 35) if t.minute == 58 else (0, 60),
        },
    )
    rollups_rebuild(start=at(30, month=10), end=NOW)
    GpuStateTransition.objects.bulk_create(
        [
            GpuStateTransition(gpu=w["W1"], state="up", at=at(31, 20, month=10)),
            GpuStateTransition(gpu=w["W2"], state="up", at=at(21, 10)),
            GpuStateTransition(gpu=w["W3"], state="up", at=at(21, 11) + dt.timedelta(seconds=20)),
        ]
    )
    return w


def _figures(user, gpu: Gpu, start: dt.datetime, end: dt.datetime) -> Figures:
    window = Interval(start, end)
    return Figures.of([selectors.held_figures(user=user, gpu_ids=[gpu.pk], window=window)[gpu.pk]])


def test_a_month_without_windows_is_no_data_not_the_last_state_carried_forward(gpus, alice):
    w1 = gpus["W1"]
    november = _figures(alice, w1, NOV, NOW)
    assert november.up_s == 0
    assert november.no_data_s == SERVICE_NOV_S == november.in_service_s
    assert november.availability == 0
    # October: up from 20:00 to the end of the 23:30 window (23:31), 3 h 31 min.
    october = _figures(alice, w1, OCT, NOV)
    assert october.up_s == 3 * 3600 + 31 * 60
    assert october.no_data_s == 31 * 24 * 3600 - october.up_s
    assert october.measure.busy_s == october.up_s / 2  # 50 % in every window
    # The runs themselves: nothing of W1 in November; in October one run ending at 23:31.
    assert gpu_telemetry_runs(gpu_ids=[w1.pk], start=NOV, end=NOW) == {}
    (run,) = gpu_telemetry_runs(gpu_ids=[w1.pk], start=OCT, end=NOV)[w1.pk]
    assert (run.state, run.start, run.end) == (
        "up",
        at(31, 20, month=10),
        at(31, 23, month=10) + 31 * MINUTE,
    )


def test_telemetry_that_ended_ten_minutes_ago_is_no_data_now_with_when_it_was_last_seen(
    gpus, alice
):
    w2 = gpus["W2"]
    ended = at(21, 11) + 50 * MINUTE
    assert gpu_states_now(gpu_ids=[w2.pk], now=NOW) == {
        w2.pk: StateNow(state="no_data", since=ended, last_seen=ended)
    }
    figures = _figures(alice, w2, NOV, NOW)
    assert figures.up_s == 110 * 60
    assert figures.no_data_s == SERVICE_NOV_S - 110 * 60
    # Ten minutes earlier it was still fresh: up since 10:00, seen to 11:50.
    assert gpu_states_now(gpu_ids=[w2.pk], now=ended + MINUTE) == {
        w2.pk: StateNow(state="up", since=at(21, 10), last_seen=ended)
    }
    # The 3-window allowance is the boundary: 3 minutes after the end still up, then no_data.
    assert gpu_states_now(gpu_ids=[w2.pk], now=ended + 3 * MINUTE)[w2.pk].state == "up"
    later = ended + 3 * MINUTE + dt.timedelta(microseconds=1)
    assert gpu_states_now(gpu_ids=[w2.pk], now=later)[w2.pk].state == "no_data"


def test_a_window_observed_only_to_35_s_ends_the_up_time_at_35_s(gpus, alice):
    w3 = gpus["W3"]
    seen = at(21, 11) + dt.timedelta(minutes=58, seconds=35)
    (run,) = gpu_telemetry_runs(gpu_ids=[w3.pk], start=NOV, end=NOW)[w3.pk]
    assert (run.start, run.end) == (at(21, 11) + dt.timedelta(seconds=20), seen)
    figures = _figures(alice, w3, NOV, NOW)
    assert figures.up_s == 58 * 60 + 35 - 20
    assert figures.no_data_s == SERVICE_NOV_S - figures.up_s
    # 1 min 25 s before now: within the allowance, so up now, and last seen at :35.
    assert gpu_states_now(gpu_ids=[w3.pk], now=NOW) == {
        w3.pk: StateNow(state="up", since=at(21, 11) + dt.timedelta(seconds=20), last_seen=seen)
    }


def test_the_pages_count_only_covered_time_and_say_when_telemetry_was_last_seen(
    client, gpus, alice
):
    client.force_login(alice)
    overview = selectors.fleet_overview(user=alice, period=selectors.month_period(now=NOW), now=NOW)
    # A1 (rollups to now) and W3 are up now; A2 (never any), W1 and W2 are not.
    assert overview.by_telemetry == [("Up", 2), ("No data", 3)]
    page = text(client.get("/"))
    assert "Up 2" in page and "No data 3" in page

    listed = rows_of(client.get("/gpus/?export=gpus"))
    header = listed[0]
    by_serial = {row[0]: dict(zip(header, row, strict=True)) for row in listed[1:]}
    assert {
        serial: (r["telemetry_now"], r["telemetry_last_seen"]) for serial, r in by_serial.items()
    } == {
        "A1": ("up", "2026-11-21T12:00:00Z"),
        "A2": ("no_data", ""),
        "W1": ("no_data", "2026-10-31T23:31:00Z"),
        "W2": ("no_data", "2026-11-21T11:50:00Z"),
        "W3": ("up", "2026-11-21T11:58:35Z"),
    }
    assert by_serial["W1"]["hours_no_data"] == "492.0"
    only_up = rows_of(client.get("/gpus/?telemetry=up&export=gpus"))
    assert [r[0] for r in only_up[1:]] == ["A1", "W3"]

    page = text(client.get(reverse("portal:gpu", args=[gpus["W2"].pk])))
    assert "Telemetry now No data since 2026-11-21 11:50:00 UTC" in page
    assert "Telemetry last seen 2026-11-21 11:50:00 UTC" in page
    hours = rows_of(client.get(reverse("portal:gpu", args=[gpus["W1"].pk]) + "?export=hours"))
    states = {row[0]: row[1:] for row in hours[1:]}
    assert states["2026-11-01T00:00:00Z"][0] == "no_data"
    assert states["2026-11-21T11:00:00Z"][0] == "no_data"
    page = text(client.get(reverse("portal:gpu", args=[gpus["W1"].pk])))
    assert "Telemetry now No data since 2026-10-31 23:31:00 UTC" in page

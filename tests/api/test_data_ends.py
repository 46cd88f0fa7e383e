"""Nothing outlives its data, through the API: a GPU whose telemetry ended is not up now (it
is no_data since its last observed second, which the API gives as ``telemetry_last_seen_at``),
and no series bucket counts a second after the telemetry ended as up.

Alice's GPU sent windows only in February, the last at Feb 28 23:30, observed 0–35 s (a
backfill that has not reached March yet); its newest transition still says up. Now is
Mar 15 12:00."""

from __future__ import annotations

import datetime as dt

import pytest

from telemetry.models import GpuStateTransition
from tests.api.conftest import client_for
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db

UTC = dt.UTC
MARCH = dt.datetime(2026, 3, 1, tzinfo=UTC)
LAST = dt.datetime(2026, 2, 28, 23, 30, tzinfo=UTC)  # the last window's start


@pytest.fixture
def ended(world):
    gpu = world.a.gpu
    s.windows(
        gpu,
        LAST - dt.timedelta(hours=2),
        LAST + dt.timedelta(minutes=1),
        node=world.a.node,
        change=lambda t, v: {**v, "observed": (0, 35)} if t == LAST else v,
    )
    s.rebuild(LAST - dt.timedelta(hours=2), LAST)
    GpuStateTransition.objects.create(gpu=gpu, state="up", at=LAST - dt.timedelta(hours=2))
    return gpu


def test_a_gpu_whose_telemetry_ended_is_no_data_now_since_it_was_last_seen(world, ended):
    client = client_for(world.keys["owner_a"])
    body = client.get(f"/api/v1/gpus/{ended.pk}").json()
    assert body["telemetry_state"] == "no_data"
    assert body["telemetry_state_since"] == "2026-02-28T23:30:35Z"
    assert body["telemetry_last_seen_at"] == "2026-02-28T23:30:35Z"
    (listed,) = client.get("/api/v1/gpus").json()["results"]
    assert listed == body


def test_series_count_no_second_after_the_telemetry_ended_as_up(world, ended):
    client = client_for(world.keys["owner_a"])
    response = client.get(
        f"/api/v1/gpus/{ended.pk}/series",
        {"start": "2026-02-28T00:00:00Z", "end": "2026-03-02T00:00:00Z", "step": "day"},
    )
    assert response.status_code == 200, response.content
    feb28, mar1 = response.json()["points"]
    # Feb 28: up 21:30–23:30:35 (two hours and 35 s), the rest no data.
    assert (feb28["up_s"], feb28["no_data_s"]) == (7235, 86400 - 7235)
    # March 1: nothing arrived, nothing is up.
    assert (mar1["up_s"], mar1["no_data_s"], mar1["availability"]) == (0, 86400, "0.000000")

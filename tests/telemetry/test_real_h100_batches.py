"""Batches the agent sent from a real H100 (tests/agent/fixtures/h100) go through the real path:
signed POST → endpoint → worker's window path → derived pass, with nothing rejected."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.test import Client

from fleet.models import Gpu
from telemetry.models import HourlyRollup, RejectedRecord, TelemetryEvent, TelemetryWindow
from telemetry.services.derived import derived_drain
from telemetry.services.processing import batches_process
from telemetry.testing import BATCHES_PATH, fleet_node, signed_batch
from tests.agent.replay import h100_batches

# A minute after the agent sealed its last batch, as when it delivered them.
DELIVERED = dt.datetime(2026, 11, 25, 18, 49, tzinfo=dt.UTC)
HOUR = dt.datetime(2026, 11, 25, 18, tzinfo=dt.UTC)


@pytest.fixture
def delivered() -> Any:
    with time_machine.travel(DELIVERED, tick=False) as traveller:
        yield traveller


@pytest.mark.django_db
def test_the_real_agent_s_batches_are_accepted_stored_and_rolled_up(delivered: Any) -> None:
    documents = h100_batches()
    windows = [w for d in documents for w in d["windows"]]
    (uuid,) = {w["gpu_uuid"] for w in windows}
    node = fleet_node(gpus=1, placed_from=DELIVERED - dt.timedelta(days=30))
    Gpu.objects.filter(pk=node.gpus[0].pk).update(nvml_uuid=uuid)
    client = Client()
    for document in documents:  # as recorded: the agent's own fields, its own batch ids
        body, headers = signed_batch(node, document)
        content_type = headers.pop("Content-Type")
        response = client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)
        assert response.status_code == 202, response.content

    batches_process(worker="test-worker")
    derived_drain(limit=100)

    assert list(RejectedRecord.objects.values_list("reason", flat=True)) == []
    stored = TelemetryWindow.objects.filter(gpu_id=node.gpus[0].pk).order_by("window_start")
    assert [w.window_start for w in stored] == [
        HOUR + dt.timedelta(minutes=m) for m in (44, 45, 46, 47, 48)
    ]
    appeared = TelemetryEvent.objects.get(kind="gpu_appeared")
    assert appeared.detail["identity"]["name"] == "NVIDIA H100 80GB HBM3"

    rollup = HourlyRollup.objects.get(gpu_id=node.gpus[0].pk, hour=HOUR)
    assert rollup.windows == 5
    assert (rollup.seconds_degraded, rollup.seconds_down) == (0, 0)
    assert rollup.temp_max_c == max(w["temp_c"]["max"] for w in windows) == 68
    assert (rollup.ecc_corrected, rollup.ecc_uncorrected, rollup.xid_events) == (0, 0, 0)
    # Energy is the counter's rise from the first window to the last: exact in the counter's
    # millijoules, whatever the 5 s power samples missed while the load started and stopped.
    rise_mj = windows[-1]["energy_mj"] - windows[0]["energy_mj"]
    assert rollup.energy_kwh == (Decimal(rise_mj) / 3_600_000_000).quantize(Decimal("1e-9"))
    # Each window counts its whole minute, the one sealed at the agent's exit included (it
    # says 2 samples expected, 2 ok: the server cannot tell it was cut short); utilization
    # is weighted by those seconds.
    assert rollup.seconds_up == 5 * 60
    assert rollup.util_gpu_seconds == sum(Decimal(str(w["util_gpu"]["avg"])) * 60 for w in windows)

"""Batches the agent sent from a real H100 and a real H200 (tests/agent/fixtures/h100, …/h200,
and the schema-2 agent's batches of the ground-truth runs, …/h200-truth and …/h100-truth) go
through the real path: signed POST → endpoint → worker's window path → derived pass, with nothing
rejected."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
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
from tests.agent.replay import recorded_batches


@dataclass(frozen=True)
class Run:
    fixture: str  # its folder under tests/agent/fixtures/
    name: str  # what NVML called the card
    hour: dt.datetime  # the hour every window of the run falls in
    minutes: tuple[int, ...]  # the windows' starts, minutes past that hour
    temp_max_c: int

    @property
    def delivered(self) -> dt.datetime:
        """A minute after the agent sealed its last batch, as when it delivered them."""
        return self.hour + dt.timedelta(minutes=self.minutes[-1] + 1)


RUNS = (
    Run(
        "h100",
        "NVIDIA H100 80GB HBM3",
        dt.datetime(2026, 11, 25, 18, tzinfo=dt.UTC),
        minutes=(44, 45, 46, 47, 48),
        temp_max_c=68,
    ),
    Run(
        "h200",
        "NVIDIA H200",
        dt.datetime(2026, 11, 26, 4, tzinfo=dt.UTC),
        minutes=(16, 17, 18, 19, 20),
        temp_max_c=58,
    ),
    Run(  # scripts/gpu_truth.py's run: known loads, 20 s of lead, 8 s after the last minute
        "h200-truth",
        "NVIDIA H200",
        dt.datetime(2026, 11, 26, 14, tzinfo=dt.UTC),
        minutes=(34, 35, 36, 37, 38, 39, 40),
        temp_max_c=57,
    ),
    Run(
        "h100-truth",
        "NVIDIA H100 80GB HBM3",
        dt.datetime(2026, 11, 27, 8, tzinfo=dt.UTC),
        minutes=(25, 26, 27, 28, 29, 30, 31),
        temp_max_c=77,
    ),
)


@pytest.fixture(params=RUNS, ids=lambda run: run.fixture)
def run(request: pytest.FixtureRequest) -> Any:
    with time_machine.travel(request.param.delivered, tick=False):
        yield request.param


@pytest.mark.django_db
def test_the_real_agent_s_batches_are_accepted_stored_and_rolled_up(run: Run) -> None:
    documents = recorded_batches(run.fixture)
    windows = [w for d in documents for w in d["windows"]]
    (uuid,) = {w["gpu_uuid"] for w in windows}
    node = fleet_node(gpus=1, placed_from=run.delivered - dt.timedelta(days=30))
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
        run.hour + dt.timedelta(minutes=m) for m in run.minutes
    ]
    appeared = TelemetryEvent.objects.get(kind="gpu_appeared")
    assert appeared.detail["identity"]["name"] == run.name

    rollup = HourlyRollup.objects.get(gpu_id=node.gpus[0].pk, hour=run.hour)
    assert rollup.windows == len(run.minutes)
    assert (rollup.seconds_degraded, rollup.seconds_down) == (0, 0)
    assert rollup.temp_max_c == max(w["temp_c"]["max"] for w in windows) == run.temp_max_c
    assert (rollup.ecc_corrected, rollup.ecc_uncorrected, rollup.xid_events) == (0, 0, 0)
    # Energy is the counter's rise from the first window to the last: exact in the counter's
    # millijoules, whatever the 5 s power samples missed while the load started and stopped.
    rise_mj = windows[-1]["energy_mj"] - windows[0]["energy_mj"]
    assert rollup.energy_kwh == (Decimal(rise_mj) / 3_600_000_000).quantize(Decimal("1e-9"))
    # Each window counts its observed seconds, utilization weighted by them. A schema-1 agent
    # does not say which seconds it observed: its windows count their whole minute, the partial
    # ones it sealed at its start and exit included, and read instantaneously; a schema-2
    # agent's say which seconds and which method.
    (schema,) = {d["schema"] for d in documents}
    if schema == 1:
        spans = [(0, 60, "instant") for _ in windows]
    else:
        spans = [(w["observed_from"], w["observed_to"], w["util_method"]) for w in windows]
    assert [(w.observed_from, w.observed_to, w.util_method) for w in stored] == spans
    observed = [to - start for start, to, _ in spans]
    assert rollup.seconds_up == sum(observed)
    busy = [Decimal(str(w["util_gpu"]["avg"])) * s for w, s in zip(windows, observed, strict=True)]
    assert rollup.util_gpu_seconds == sum(busy)

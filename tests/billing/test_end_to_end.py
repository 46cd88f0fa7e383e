"""From the agent's signed batches to a statement: the real ingest path, then a close."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.test import Client

from billing.models import Statement
from billing.services.closing import period_close
from billing.services.periods import period_for_month
from fleet.models import LifecycleState, LifecycleTransition
from telemetry.models import HourlyRollup
from telemetry.services.derived import derived_process
from telemetry.services.processing import batches_process
from telemetry.testing import BATCHES_PATH, batch_document, fleet_node, signed_batch, window
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
OCTOBER = (dt.datetime(2026, 10, 1, tzinfo=UTC), dt.datetime(2026, 11, 1, tzinfo=UTC))
LAST_TWO_HOURS = OCTOBER[1] - dt.timedelta(hours=2)


def test_signed_batches_processed_by_the_worker_end_up_on_the_statement(oscar, disclosure):
    node = fleet_node(gpus=1, placed_from=OCTOBER[0])
    (gpu,) = node.gpus
    LifecycleTransition.objects.create(gpu=gpu, state=LifecycleState.IN_SERVICE, at=OCTOBER[0])
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, OCTOBER[0])
    cluster = node.node.cluster
    s.card(s.Fleet(cluster.site, cluster, node.node, gpu.model), oscar)
    client = Client()
    with time_machine.travel(OCTOBER[1] + dt.timedelta(minutes=2), tick=False):
        for hour in range(2):
            docs = [
                window(
                    gpu.nvml_uuid,
                    LAST_TWO_HOURS + dt.timedelta(minutes=60 * hour + m),
                    energy_mj=(60 * hour + m + 1) * 36_000_000,
                )
                for m in range(60)
            ]
            body, headers = signed_batch(node, batch_document(node=node, windows=docs))
            content_type = headers.pop("Content-Type")
            response = client.post(
                BATCHES_PATH, data=body, content_type=content_type, headers=headers
            )
            assert response.status_code == 202, response.content
        batches_process(worker="test-worker")
        # The worker's second step: transitions and rollups for the GPU-hours it touched.
        derived = derived_process(limit=1000)
    assert (derived.busy, derived.claimed) == (False, 2)
    assert HourlyRollup.objects.filter(gpu=gpu).count() == 2
    period_close(period=period_for_month(year=2026, month=10), by=oscar)
    (line,) = Statement.objects.get(owner=alice).lines.all()
    # October: 31 days in service = 2,678,400 s; 2 h up, the rest no_data (agent silent).
    assert (line.in_service_s, line.up_s, line.no_data_s) == (2_678_400, 7200, 2_671_200)
    assert line.availability == Decimal("0.002688")  # 7,200 / 2,678,400 = 0.0026881…
    assert line.utilization == Decimal("0.500000")
    # 119 counter deltas of 0.01 kWh (the first window has no earlier one) = 1.19 kWh;
    # × 1.5 × 0.20 = 0.357 → 0.36. Hosting: the whole month in service = 100.00.
    assert line.energy_kwh == Decimal("1.190000")
    assert (line.gross, line.hosting_fee, line.power_cost, line.net) == (
        Decimal("0.00"),
        Decimal("100.00"),
        Decimal("0.36"),
        Decimal("-100.36"),
    )

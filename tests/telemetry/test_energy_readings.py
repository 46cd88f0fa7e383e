"""Energy is charged once, whatever is missing: a window without a counter reading, or a
silence of any length, leaves its energy to the next reading (docs/accounting.md rule 6).

Each test goes through the real path (signed POST, the worker's window path, the derived
pass) and compares the hourly rollups with a rebuild and with the rule worked by hand.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from decimal import Decimal

import pytest

from telemetry.models import HourlyRollup
from telemetry.services.derived import derived_drain, rollups_rebuild
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, window
from tests.telemetry.test_derived import deliver_shuffled, rollup_rows

pytestmark = pytest.mark.usefixtures("now")

# NOW is 2026-11-21 12:00:30: everything here is before it, after the node was placed.
T0 = dt.datetime(2026, 10, 25, 9, 0, tzinfo=dt.UTC)  # the test node is placed 30 days before
HOUR = dt.timedelta(hours=1)
MJ_PER_KWH = 3_600_000_000


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def deliver(post, node, windows) -> None:
    response = post(node, batch_document(node=node, windows=windows))
    assert response.status_code == 202, response.json()
    batches_process(worker="w")
    derived_drain(limit=100)


def energy_by_hour(gpu) -> dict[dt.datetime, Decimal]:
    return dict(HourlyRollup.objects.filter(gpu=gpu).values_list("hour", "energy_kwh"))


def kwh(mj: int) -> Decimal:
    return (Decimal(mj) / MJ_PER_KWH).quantize(Decimal("1e-9"))


def test_a_window_without_a_reading_leaves_its_energy_to_the_next_reading(node, post):
    g = node.gpus[0]
    deliver(
        post,
        node,
        [
            window(g.nvml_uuid, at(0), energy_mj=1_000_000_000),
            window(g.nvml_uuid, at(1), energy_mj=None),
            window(g.nvml_uuid, at(2), energy_mj=1_090_000_000),  # 90 MJ since minute 0
            window(g.nvml_uuid, at(58), energy_mj=1_200_000_000),
            window(g.nvml_uuid, at(59), energy_mj=None),  # the hour's last minute unread
            window(g.nvml_uuid, at(60), energy_mj=None),  # and the next hour's first
            window(g.nvml_uuid, at(61), energy_mj=1_272_000_000),  # 72 MJ since minute 58
        ],
    )
    assert energy_by_hour(g) == {
        T0: kwh(90_000_000 + 110_000_000),
        T0 + HOUR: kwh(72_000_000),
    }


def test_the_energy_of_a_long_silence_goes_to_the_first_reading_after_it(node, post):
    g0, g1 = node.gpus[0], node.gpus[1]
    later = 3 * 24 * 60 + 30  # three days and 30 minutes later: longer than 2 days
    deliver(
        post,
        node,
        [
            window(g0.nvml_uuid, at(0), energy_mj=5_000_000_000),
            window(g0.nvml_uuid, at(later), energy_mj=None),
            window(g0.nvml_uuid, at(later + 1), energy_mj=5_000_000_000 + 180_000_000_000),
            # The other GPU's driver reloaded during the silence: only what the counter
            # counted since is known, and charged.
            window(g1.nvml_uuid, at(0), energy_mj=5_000_000_000),
            window(g1.nvml_uuid, at(later), energy_mj=40_000_000),
        ],
    )
    hour = T0 + dt.timedelta(days=3)
    assert energy_by_hour(g0) == {T0: Decimal("0E-9"), hour: kwh(180_000_000_000)}
    assert energy_by_hour(g1) == {T0: Decimal("0E-9"), hour: kwh(40_000_000)}


def test_a_late_window_inside_a_long_silence_is_not_charged_twice(node, post):
    g = node.gpus[0]
    later = 4 * 24 * 60
    deliver(
        post,
        node,
        [
            window(g.nvml_uuid, at(0), energy_mj=1_000_000_000),
            window(g.nvml_uuid, at(later), energy_mj=9_000_000_000),
        ],
    )
    assert sum(energy_by_hour(g).values()) == kwh(8_000_000_000)
    # The agent's spool delivers a window from inside the silence, three days late: the
    # reading after it must now count only from it.
    deliver(post, node, [window(g.nvml_uuid, at(later // 2), energy_mj=4_000_000_000)])
    by_hour = energy_by_hour(g)
    assert by_hour[T0 + dt.timedelta(days=2)] == kwh(3_000_000_000)
    assert by_hour[T0 + dt.timedelta(days=4)] == kwh(5_000_000_000)
    assert sum(by_hour.values()) == kwh(8_000_000_000)


def test_shuffled_delivery_with_missing_readings_and_long_silences_equals_a_rebuild(node, post):
    """Whatever order the windows come in, the rollups equal a rebuild, and the energy of
    the whole stretch is the counter's rise from the first reading to the last (the resets'
    new values added), each part once."""
    rng = random.Random(19)
    windows = []
    for g in node.gpus:
        counter = 10**9
        minute = 0
        for _ in range(120):
            minute += 1 if rng.random() < 0.95 else rng.choice([90, 3 * 24 * 60])
            counter += rng.randrange(10**7)
            if rng.random() < 0.03:  # the driver reloaded
                counter = rng.randrange(10**6)
            reading = None if rng.random() < 0.2 else counter
            windows.append(window(g.nvml_uuid, at(minute), energy_mj=reading))
    deliver_shuffled(rng, windows, chunk=17, send=lambda part: deliver_only(post, node, part))
    incremental = rollup_rows()
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + dt.timedelta(days=60))
    assert rollup_rows() == incremental
    for g in node.gpus:
        readings = [
            (w["window_start"], w["energy_mj"])
            for w in windows
            if w["gpu_uuid"] == g.nvml_uuid and w["energy_mj"] is not None
        ]
        readings.sort()
        by_rule = sum(
            (now if now < before else now - before)
            for (_, before), (_, now) in itertools.pairwise(readings)
        )
        total = sum(energy_by_hour(g).values(), Decimal(0))
        # Each hour is rounded once to 1e-9 kWh: within half a unit per hour of the exact sum.
        assert abs(total - Decimal(by_rule) / MJ_PER_KWH) <= Decimal("0.5e-9") * len(
            energy_by_hour(g)
        )


def deliver_only(post, node, windows) -> None:
    response = post(node, batch_document(node=node, windows=windows))
    assert response.status_code == 202, response.json()

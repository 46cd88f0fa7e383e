"""The hourly rollup (``telemetry.services.derived._ROLLUPS``) equals the statement as issue 22
found it (``rollup_reference``, frozen), row for row and digit for digit, on windows made to
reach every branch: runs of touched hours and isolated ones, hours with no window, readings
missing at the start of an hour, counters reset, ECC counters missing, partial minutes,
silences shorter and longer than ``LOOKAROUND``, XIDs. A faster statement must pass it
unchanged (two were tried: docs/scaling.md)."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any

import pytest
from django.db import connection, transaction

from telemetry.services.derived import _ROLLUPS, _TEMP, LOOKAROUND, TALLIED
from telemetry.services.partitions import window_partitions_ensure
from telemetry.services.processing import COPY_WINDOWS, WINDOW_TYPES
from tests.telemetry.rollup_reference import ROLLUPS_REFERENCE

T0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
DAYS = 8
COLUMNS = (
    "gpu_id, hour, windows, seconds_up, seconds_degraded, seconds_down, util_gpu_seconds, "
    "energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected, xid_events"
)


def _windows(rng: random.Random, gpu: uuid.UUID, node: uuid.UUID) -> list[tuple[Any, ...]]:
    """A GPU's windows over ``DAYS`` days: bursts of minutes between silences of minutes,
    hours or days, counters that rise, go missing and reset."""
    rows: list[tuple[Any, ...]] = []
    energy, ecc = rng.randrange(10**9), rng.randrange(100)
    minute = rng.randrange(120)
    while minute < DAYS * 24 * 60:
        for _ in range(rng.choice([1, 3, 30, 90, 200])):
            start = T0 + dt.timedelta(minutes=minute)
            energy += rng.randrange(6 * 10**6)
            ecc += rng.choice([0, 0, 0, 1, 5])
            if rng.random() < 0.02:
                energy, ecc = rng.randrange(10**6), 0  # driver reload
            observed = rng.choice([(0, 60)] * 8 + [(0, 30), (15, 60), (5, 6)])
            state = rng.choice(["up"] * 6 + ["degraded", "down"])
            row: list[Any] = [None] * len(WINDOW_TYPES)
            row[:8] = [gpu, start, node, 1, 12, 12, state, None]
            row[9] = rng.choice([None, rng.uniform(0, 100), 37.25])  # util_gpu_avg
            row[17] = None if rng.random() < 0.15 else energy  # energy_mj
            row[19] = rng.uniform(30, 90)  # temp_max_c
            row[23] = None if rng.random() < 0.1 else ecc  # ecc_corrected
            row[24] = None if rng.random() < 0.1 else ecc // 3  # ecc_uncorrected
            row[31], row[32] = observed
            rows.append(tuple(row))
            minute += 1
        minute += rng.choice([1, 7, 61, 150, 24 * 60, 3 * 24 * 60 + 11])
    return rows


def _touched(rng: random.Random, gpus: list[uuid.UUID]) -> list[tuple[uuid.UUID, dt.datetime]]:
    """Runs of consecutive hours, isolated hours, every second and third hour of a day (an
    hour whose hour before is not touched, though the one before that is), and every hour of
    one GPU."""
    hours = [T0 + HOUR * h for h in range(DAYS * 24 + 24)]
    touched = {(gpus[0], h) for h in hours}
    for gpu in gpus[1:]:
        for step in (2, 3):
            day = rng.randrange(DAYS) * 24
            touched.update((gpu, h) for h in hours[day : day + 24 : step])
        for _ in range(12):
            first = rng.randrange(len(hours))
            for h in hours[first : first + rng.choice([1, 1, 2, 5, 30])]:
                touched.add((gpu, h))
    return sorted(touched)


@pytest.mark.django_db
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_rollup_equals_the_reference_digit_for_digit(node, seed):
    rng = random.Random(seed)
    gpus = [g.id for g in node.gpus]
    gpus += [uuid.UUID(int=rng.getrandbits(128)) for _ in range(4)]  # no foreign key: any id
    window_partitions_ensure(days=[(T0 + dt.timedelta(days=d)).date() for d in range(DAYS + 1)])
    rows = [row for gpu in gpus for row in _windows(rng, gpu, node.id)]
    touched = _touched(rng, gpus)
    xids = [rng.choice(touched) for _ in range(40)]
    params: dict[str, Any] = {"around": LOOKAROUND, "tallied": TALLIED}
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.cursor.copy(COPY_WINDOWS) as copy:
            copy.set_types(WINDOW_TYPES)
            for row in rows:
                copy.write_row(row)
        for i, (gpu, hour) in enumerate(xids):
            if gpu in gpus[:2]:  # events name placed GPUs (a foreign key)
                cursor.execute(
                    "INSERT INTO telemetry_telemetryevent (node_id, event_id, gpu_id, gpu_uuid, "
                    "kind, occurred_at, xid, detail, batch_id) "
                    "VALUES (%s, %s, %s, '', 'xid', %s, 79, '{}', 1)",
                    [node.id, uuid.UUID(int=i + 1), gpu, hour + dt.timedelta(seconds=i * 37)],
                )
        cursor.execute(_TEMP)
        cursor.executemany(
            "INSERT INTO telemetry_touched_hours (gpu_id, hour) VALUES (%s, %s)", touched
        )
        cursor.execute(_ROLLUPS, params)
        assert cursor.rowcount == len(touched)
        cursor.execute(
            "CREATE TEMP TABLE rollup_reference AS "
            "SELECT * FROM telemetry_hourlyrollup WITH NO DATA"
        )
        cursor.execute(ROLLUPS_REFERENCE, params)
        # Compared as the text PostgreSQL stores: every digit, null or not.
        cursor.execute(
            f"SELECT ({COLUMNS})::text FROM telemetry_hourlyrollup ORDER BY gpu_id, hour"  # noqa: S608
        )
        ours = [r[0] for r in cursor.fetchall()]
        cursor.execute(f"SELECT ({COLUMNS})::text FROM rollup_reference ORDER BY gpu_id, hour")  # noqa: S608
        reference = [r[0] for r in cursor.fetchall()]
        cursor.execute(
            "SELECT count(*) FILTER (WHERE energy_kwh > 0), count(*) FILTER (WHERE windows = 0), "
            "count(*) FILTER (WHERE xid_events > 0), count(*) FILTER (WHERE ecc_corrected > 0) "
            "FROM rollup_reference"
        )
        with_energy, empty, with_xids, with_ecc = cursor.fetchone()
    assert len(ours) == len(reference) == len(touched)
    assert ours == reference
    # The windows reached the branches they were made for.
    assert with_energy > 20 and empty > 10 and with_xids > 5 and with_ecc > 20, (
        with_energy,
        empty,
        with_xids,
        with_ecc,
    )

"""Daily rollups: always the hourly rollups summed per GPU and UTC day, whoever writes them
(the derived pass, a rebuild, the ORM, raw SQL), including concurrent writers of one day."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connection

from telemetry.models import DailyRollup, HourlyRollup
from telemetry.services.derived import derived_drain, rollups_rebuild
from telemetry.services.processing import batches_process
from telemetry.testing import window
from tests.telemetry.test_derived import deliver_shuffled, send, side_connection

D = Decimal
MIDNIGHT = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
NOV_20, NOV_21 = dt.date(2026, 11, 20), dt.date(2026, 11, 21)

# The hourly rollups summed per GPU and UTC day, as text (a sum's scale is part of it).
_BY_DAY = """
SELECT gpu_id, (hour AT TIME ZONE 'UTC')::date, sum(seconds_up + seconds_degraded),
       sum(seconds_down), sum(util_gpu_seconds)::text, sum(energy_kwh)::text
  FROM telemetry_hourlyrollup
 GROUP BY 1, 2
"""
_DAILY = """
SELECT gpu_id, day, seconds_up, seconds_down, util_gpu_seconds::text, energy_kwh::text
  FROM telemetry_dailyrollup
"""


def by_day(cursor: Any = None) -> list[tuple[Any, ...]]:
    if cursor is None:
        with connection.cursor() as cursor:
            return by_day(cursor)
    cursor.execute(_BY_DAY)
    return sorted(cursor.fetchall(), key=str)


def daily(cursor: Any = None) -> list[tuple[Any, ...]]:
    if cursor is None:
        with connection.cursor() as cursor:
            return daily(cursor)
    cursor.execute(_DAILY)
    return sorted(cursor.fetchall(), key=str)


def rollup(gpu: uuid.UUID, hour: dt.datetime, **figures: object) -> HourlyRollup:
    values: dict[str, object] = {
        "windows": 60,
        "seconds_up": 3000,
        "seconds_degraded": 0,
        "seconds_down": 0,
        "util_gpu_seconds": D("1.000"),
        "energy_kwh": D("0.000000001"),
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "xid_events": 0,
    }
    values.update(figures)
    return HourlyRollup(gpu_id=gpu, hour=hour, **values)


@pytest.mark.usefixtures("now")
def test_late_windows_across_midnight_keep_the_days_equal_to_the_hours(node, post):
    """Windows over 22:00–02:00 (two UTC days), shuffled and delivered late in many batches,
    the pass taking 3 marks at a time: after it, each GPU's two days are its hours summed."""
    rng = random.Random(7)
    windows = []
    for g in node.gpus:
        energy = 0
        for m in range(240):
            if rng.random() < 0.1:
                continue
            energy += rng.randrange(10**7)
            start = MIDNIGHT - 2 * HOUR + dt.timedelta(minutes=m)
            state = rng.choice(["up", "up", "degraded", "down"])
            util = {"min": 0.0, "avg": rng.random() * 100, "max": 100.0}
            windows.append(window(g.nvml_uuid, start, energy_mj=energy, state=state, util_gpu=util))
    deliver_shuffled(rng, windows, chunk=37, send=lambda part: send(post, node, part))
    rows = daily()
    assert [(gpu, day) for gpu, day, *_ in rows] == sorted(
        [(g.id, d) for g in node.gpus for d in (NOV_20, NOV_21)], key=str
    )
    assert rows == by_day()
    # Every second of both days is counted once: 4 hours of up, degraded or down windows.
    observed = sum(r.seconds_up + r.seconds_degraded + r.seconds_down
                   for r in HourlyRollup.objects.all())  # fmt: skip
    assert sum(up + down for _, _, up, down, *_ in rows) == observed > 0

    # A late window at 21:00, before the first day's hours: that day is recomputed (a new
    # hour, and 22:00's first energy delta is now taken from it), the next day is not.
    before = {(gpu, day): row for gpu, day, *row in rows}
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, MIDNIGHT - 3 * HOUR, state="down")])
    batches_process(worker="w")
    derived_drain(limit=3)
    after = daily()
    assert after == by_day()
    assert {(gpu, day) for gpu, day, *_ in after} == set(before)
    now_ = {(gpu, day): row for gpu, day, *row in after}
    assert {key for key, row in now_.items() if before[key] != row} == {(g0.id, NOV_20)}
    assert now_[g0.id, NOV_20][1] == before[g0.id, NOV_20][1] + 60  # its minute down


@pytest.mark.usefixtures("now")
def test_a_rebuild_and_a_delete_leave_the_days_equal_to_the_hours(node, post):
    g0, g1 = node.gpus
    minutes = [MIDNIGHT + dt.timedelta(minutes=m) for m in range(-90, 90, 7)]
    windows = [window(g.nvml_uuid, start, energy_mj=(i + 1) * 10**9)
               for g in (g0, g1) for i, start in enumerate(minutes)]  # fmt: skip
    send(post, node, windows)
    batches_process(worker="w")
    derived_drain(limit=100)
    computed = daily()
    assert len(computed) == 4 and computed == by_day()
    HourlyRollup.objects.filter(gpu=g0, hour__lt=MIDNIGHT).delete()  # all of g0's first day
    assert [(gpu, day) for gpu, day, *_ in daily()] == sorted(
        [(g0.id, NOV_21), (g1.id, NOV_20), (g1.id, NOV_21)], key=str
    )
    HourlyRollup.objects.filter(gpu=g1, hour=MIDNIGHT).delete()  # one hour of g1's second day
    assert daily() == by_day() and len(daily()) == 3
    rollups_rebuild(start=MIDNIGHT - 2 * HOUR, end=MIDNIGHT + 2 * HOUR)
    assert daily() == computed


def test_rows_written_through_the_orm_sum_per_utc_day(db):
    a, b = uuid.uuid4(), uuid.uuid4()
    HourlyRollup.objects.bulk_create(
        [
            rollup(a, MIDNIGHT - HOUR, seconds_up=3000, seconds_degraded=500, seconds_down=100,
                   util_gpu_seconds=D("150000.125"), energy_kwh=D("0.700000001")),
            rollup(a, MIDNIGHT, seconds_up=3600, util_gpu_seconds=D("0.500"),
                   energy_kwh=D("0.7")),
            rollup(a, MIDNIGHT + 23 * HOUR, seconds_up=0, seconds_down=3600,
                   util_gpu_seconds=D("0"), energy_kwh=D("0.000000002")),
            rollup(b, MIDNIGHT + HOUR),
        ]
    )  # fmt: skip
    assert daily() == sorted(
        [
            (a, NOV_20, 3500, 100, "150000.125", "0.700000001"),
            (a, NOV_21, 3600, 3600, "0.500", "0.700000002"),
            (b, NOV_21, 3000, 0, "1.000", "0.000000001"),
        ],
        key=str,
    )
    # One row created, one updated in place, one moved to another day, one deleted.
    rollup(b, MIDNIGHT + 2 * HOUR, seconds_degraded=600).save()
    HourlyRollup.objects.filter(gpu_id=a, hour=MIDNIGHT).update(util_gpu_seconds=D("2.250"))
    HourlyRollup.objects.filter(gpu_id=a, hour=MIDNIGHT - HOUR).update(hour=MIDNIGHT + 5 * HOUR)
    HourlyRollup.objects.filter(gpu_id=a, hour=MIDNIGHT + 23 * HOUR).delete()
    assert daily() == sorted(
        [
            (a, NOV_21, 7100, 100, "150002.375", "1.400000001"),
            (b, NOV_21, 6600, 0, "2.000", "0.000000002"),
        ],
        key=str,
    )
    assert daily() == by_day()
    assert DailyRollup.objects.get(gpu_id=b).seconds_up == 6600  # the model reads it back
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_hourlyrollup")
    assert daily() == []


def test_an_update_that_changes_nothing_rewrites_no_day(db):
    gpu = uuid.uuid4()
    rollup(gpu, MIDNIGHT).save()
    # A rewritten row would move to another slot (a new row version), even in this same
    # transaction; an unchanged day keeps its slot.
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM telemetry_dailyrollup")
        (ctid,) = cursor.fetchone()
        cursor.execute("UPDATE telemetry_hourlyrollup SET xid_events = 1")
        cursor.execute("SELECT ctid::text FROM telemetry_dailyrollup")
        assert cursor.fetchone() == (ctid,)
        cursor.execute("UPDATE telemetry_hourlyrollup SET seconds_up = 10")
        cursor.execute("SELECT ctid::text, seconds_up FROM telemetry_dailyrollup")
        moved, seconds = cursor.fetchone()
    assert (moved != ctid, seconds) == (True, 10)


def test_a_new_day_is_inserted_with_its_sums_and_an_existing_one_summed_again(db):
    """A day's first hours write its row once, sums and all; a later hour rewrites it."""

    def counts() -> tuple[int, int]:  # (rows inserted, rows updated) in this transaction
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables "
                "WHERE relname = 'telemetry_dailyrollup'"
            )
            inserted, updated = cursor.fetchone()
            return int(inserted), int(updated)

    def written(before: tuple[int, int]) -> tuple[int, int]:
        inserted, updated = counts()
        return inserted - before[0], updated - before[1]

    gpu = uuid.uuid4()
    before = counts()
    HourlyRollup.objects.bulk_create(
        [rollup(gpu, MIDNIGHT), rollup(gpu, MIDNIGHT + HOUR, seconds_degraded=600)]
    )
    assert written(before) == (1, 0)
    assert daily() == [(gpu, NOV_21, 6600, 0, "2.000", "0.000000002")] == by_day()
    before = counts()
    rollup(gpu, MIDNIGHT + 2 * HOUR, seconds_down=60).save()
    assert written(before) == (0, 1)
    assert daily() == [(gpu, NOV_21, 9600, 60, "3.000", "0.000000003")] == by_day()


@pytest.mark.django_db(transaction=True)
def test_two_transactions_writing_hours_of_one_new_day_both_count():
    """Each writer sums the day in its own statement; the second must wait for the first
    and then see its hour, or the day would hold only the last writer's hour."""
    gpu = uuid.uuid4()
    insert = (
        "INSERT INTO telemetry_hourlyrollup (gpu_id, hour, windows, seconds_up, "
        "seconds_degraded, seconds_down, util_gpu_seconds, energy_kwh, ecc_corrected, "
        "ecc_uncorrected, xid_events, computed_at) "
        "VALUES (%s, %s, 60, %s, 0, 0, 1.5, 0.25, 0, 0, 0, now())"
    )

    def write(connection: psycopg.Connection, sql: str, params: list[Any], done: threading.Event):
        connection.execute(sql, params)
        connection.commit()
        done.set()

    with side_connection() as first, side_connection() as second:
        first.execute(insert, [gpu, MIDNIGHT + HOUR, 1000])  # uncommitted
        done = threading.Event()
        thread = threading.Thread(
            target=write, args=(second, insert, [gpu, MIDNIGHT + 2 * HOUR, 2000], done)
        )
        thread.start()
        time.sleep(0.5)
        assert not done.is_set()  # waiting for the first writer's day row
        first.commit()
        thread.join(10)
        assert done.is_set()
    assert daily() == [(gpu, NOV_21, 3000, 0, "3.000", "0.500000000")] == by_day()
    # The other way round: a delete holds the day; an insert of another hour waits, then sums
    # the day as the delete left it.
    with side_connection() as first, side_connection() as second:
        first.execute("DELETE FROM telemetry_hourlyrollup WHERE hour = %s", [MIDNIGHT + HOUR])
        done = threading.Event()
        thread = threading.Thread(
            target=write, args=(second, insert, [gpu, MIDNIGHT + 3 * HOUR, 4000], done)
        )
        thread.start()
        time.sleep(0.5)
        assert not done.is_set()
        first.commit()
        thread.join(10)
        assert done.is_set()
    assert daily() == [(gpu, NOV_21, 6000, 0, "3.000", "0.500000000")] == by_day()

"""A recent hour's rollup extended with its new windows (``derived._HOURS_FROM_CLAIM``'s
``since``) equals the hour read whole, digit for digit: minute by minute as live, with passes
after most minutes, gaps, late windows, readings and ECC counters missing, counters reset,
partial minutes, state changes and XIDs — and the extension is taken only when nothing before
the new windows changed."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any

import pytest
from django.db import connection, transaction

from telemetry.models import HourlyRollup
from telemetry.services.derived import TALLIED, derived_drain, derived_mark, rollups_rebuild
from telemetry.services.partitions import window_partitions_ensure
from telemetry.services.processing import COPY_WINDOWS, WINDOW_TYPES

MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)
FIGURES = (
    "gpu_id, hour, windows, seconds_up, seconds_degraded, seconds_down, util_gpu_seconds, "
    "energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected, xid_events"
)


def _start() -> dt.datetime:
    """Two and a half hours before the database's clock, on a minute: the hours it spans are
    partly within ``TALLIED`` (extended) and partly before it (always read whole)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', now() - interval '150 minutes')")
        (start,) = cursor.fetchone()
    assert isinstance(start, dt.datetime)
    return start


class _Gpu:
    """A GPU's counters as minutes go by."""

    def __init__(self, rng: random.Random, gpu: uuid.UUID) -> None:
        self.rng, self.id = rng, gpu
        self.energy, self.ecc = rng.randrange(10**9), rng.randrange(100)

    def row(self, start: dt.datetime, node: uuid.UUID) -> tuple[Any, ...]:
        rng = self.rng
        self.energy += rng.randrange(6 * 10**6)
        self.ecc += rng.choice([0, 0, 0, 1, 5])
        if rng.random() < 0.03:
            self.energy, self.ecc = rng.randrange(10**6), 0  # driver reload
        row: list[Any] = [None] * len(WINDOW_TYPES)
        row[:8] = [self.id, start, node, 1, 12, 12, rng.choice(["up"] * 8 + ["degraded", "down"]),
                   None]  # fmt: skip
        row[9] = rng.choice([None, rng.uniform(0, 100), 37.25, 100 / 3])  # util_gpu_avg
        row[17] = None if rng.random() < 0.15 else self.energy  # energy_mj
        row[19] = rng.choice([None, rng.uniform(30, 90)])  # temp_max_c
        row[23] = None if rng.random() < 0.1 else self.ecc  # ecc_corrected
        row[24] = None if rng.random() < 0.1 else self.ecc // 3  # ecc_uncorrected
        row[31], row[32] = rng.choice([(0, 60)] * 8 + [(0, 30), (15, 60), (5, 6)])
        return tuple(row)


def _chunk(rows: list[tuple[Any, ...]], xids: list[tuple[uuid.UUID, dt.datetime]],
           node: uuid.UUID) -> None:  # fmt: skip
    """Windows, events and their marks in one transaction, as a chunk commits them."""
    with transaction.atomic(), connection.cursor() as cursor:
        if rows:
            with cursor.cursor.copy(COPY_WINDOWS) as copy:
                copy.set_types(WINDOW_TYPES)
                for row in rows:
                    copy.write_row(row)
        for gpu, at in xids:
            cursor.execute(
                "INSERT INTO telemetry_telemetryevent (node_id, event_id, gpu_id, gpu_uuid, "
                "kind, occurred_at, xid, detail, batch_id) "
                "VALUES (%s, %s, %s, '', 'xid', %s, 79, '{}', 1)",
                [node, uuid.uuid4(), gpu, at],
            )
        marks = [(r[0], r[1], r[1]) for r in rows] + [(g, at, at) for g, at in xids]
        derived_mark(cursor=cursor, marks=marks)


def _stored() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ({FIGURES})::text FROM telemetry_hourlyrollup ORDER BY 1")  # noqa: S608
        return [r[0] for r in cursor.fetchall()]


def _read_whole(start: dt.datetime, end: dt.datetime) -> list[str]:
    """Every rollup of the range recomputed from its windows, then put back as it was."""
    with transaction.atomic():
        rollups_rebuild(start=start, end=end)
        whole = _stored()
        transaction.set_rollback(True)
    return whole


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_live_passes_extend_recent_hours_to_the_digits_of_a_whole_read(node, seed):
    rng = random.Random(seed)
    start = _start()
    window_partitions_ensure(days=sorted({(start + d * HOUR).date() for d in range(5)}))
    gpus = [_Gpu(rng, g.id) for g in node.gpus] + [
        _Gpu(rng, uuid.UUID(int=rng.getrandbits(128)))
        for _ in range(3)  # no foreign key
    ]
    skipped: list[tuple[_Gpu, dt.datetime]] = []  # minutes not sent yet: late windows later
    extended = whole = 0
    minutes = 150
    for m in range(minutes):
        at = start + m * MINUTE
        rows, xids = [], []
        for gpu in gpus:
            chance = rng.random()
            if chance < 0.08:
                skipped.append((gpu, at))  # sent late, or never
            elif chance < 0.1:
                pass  # a gap
            else:
                rows.append(gpu.row(at, node.id))
        if skipped and rng.random() < 0.15:  # a late window, minutes or an hour behind
            gpu, late = skipped.pop(rng.randrange(len(skipped)))
            rows.append(gpu.row(late, node.id))
        if rng.random() < 0.05:  # an XID of a placed GPU, within the minute
            xids.append(
                (node.gpus[rng.randrange(len(node.gpus))].id, at + 17 * dt.timedelta(seconds=1))
            )
        _chunk(rows, xids, node.id)
        if rng.random() < 0.8:  # most minutes a pass; now and then two minutes in one
            result = derived_drain(limit=rng.choice([3, 1000]))
            extended += result.extended
            whole += result.rollups - result.extended
        if m % 30 == 29:
            derived_drain(limit=1000)
            assert _stored() == _read_whole(start - 3 * HOUR, at + HOUR), m
    derived_drain(limit=1000)
    assert _stored() == _read_whole(start - 3 * HOUR, start + minutes * MINUTE + HOUR)
    # Both ways were taken, and mostly the extension where it may be.
    assert extended > 100 and whole > 30, (extended, whole)


def test_an_hour_is_read_whole_when_anything_before_its_new_windows_changed(node):
    """A late window before the rollup's last one, or a rollup rewritten by anything else
    than a pass (its tally then disagrees), or a mark just before the hour: read whole."""
    rng = random.Random(7)
    gpu = _Gpu(rng, node.gpus[0].id)
    hour = (_start() + HOUR).replace(minute=0)  # 1.5-2.5 hours ago: within TALLIED
    window_partitions_ensure(days=sorted({(hour - HOUR).date(), hour.date()}))
    minute = hour + 5 * MINUTE

    def send(at: dt.datetime) -> None:
        _chunk([gpu.row(at, node.id)], [], node.id)

    for m in range(3):
        send(minute + m * MINUTE)
    assert derived_drain(limit=1000).extended == 0  # the hour's first rollup: read whole
    send(minute + 3 * MINUTE)
    assert derived_drain(limit=1000).extended == 1  # one new window after the others
    send(minute + 5 * MINUTE)
    send(minute - MINUTE)  # late: before the rollup's first window
    assert derived_drain(limit=1000).extended == 0
    send(minute + 6 * MINUTE)
    assert derived_drain(limit=1000).extended == 1
    rollup = HourlyRollup.objects.get(gpu_id=gpu.id, hour=hour)
    rollup.computed_at = rollup.computed_at - dt.timedelta(seconds=1)  # rewritten elsewhere
    rollup.save()
    send(minute + 7 * MINUTE)
    assert derived_drain(limit=1000).extended == 0
    send(minute + 8 * MINUTE)
    assert derived_drain(limit=1000).extended == 1
    send(hour - MINUTE)  # the hour before, marked in the same pass
    send(minute + 9 * MINUTE)
    assert derived_drain(limit=1000).extended == 0
    send(minute + 10 * MINUTE)
    assert derived_drain(limit=1000).extended == 1
    assert _stored() == _read_whole(hour - HOUR, hour + 2 * HOUR)


def test_beat_prunes_the_tallies_of_hours_past_tallied(node):
    """The hourly retention task deletes the tallies a pass no longer writes or reads."""
    from telemetry.services.upkeep import hour_tallies_prune

    def tallied() -> list[dt.datetime]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT hour FROM telemetry_hourtally ORDER BY hour")
            return [row[0] for row in cursor.fetchall()]

    rng = random.Random(3)
    gpu = _Gpu(rng, node.gpus[0].id)
    start = _start()
    window_partitions_ensure(days=sorted({(start + d * HOUR).date() for d in range(3)}))
    for m in range(0, 150, 10):
        _chunk([gpu.row(start + m * MINUTE, node.id)], [], node.id)
    derived_drain(limit=1000)
    hours = tallied()
    assert len(hours) >= 2  # the hours within TALLIED of the database's clock
    assert hour_tallies_prune(now=hours[0] + TALLIED) == 0
    assert hour_tallies_prune(now=hours[1] + TALLIED) == 1
    assert tallied() == hours[1:]

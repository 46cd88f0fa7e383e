"""The derived pass: marks left by the window path, claimed once, recomputed set-based, and
the races between a pass and the windows that keep arriving."""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from telemetry.models import GpuStateTransition, HourlyRollup
from telemetry.selectors import derived_pending, ingest_health
from telemetry.services.derived import (
    MARKS_LOCK,
    PASS_LOCK,
    derived_drain,
    derived_process,
    rollups_rebuild,
)
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, window
from tests.conftest import database_url
from tests.telemetry.conftest import NOW

T0 = dt.datetime(2026, 11, 21, 9, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def send(post, node, windows, events=None):
    response = post(node, batch_document(node=node, windows=windows, events=events))
    assert response.status_code == 202, response.json()


def deliver_shuffled(rng: random.Random, windows: list[dict[str, Any]], *, chunk: int,
                     send: Callable[[list[dict[str, Any]]], None]) -> None:  # fmt: skip
    """Delivers the windows in a random order, `chunk` a batch, running the derived pass now
    and then (3 marks at a time), and drains it: incremental passes over late arrivals."""
    rng.shuffle(windows)
    for first in range(0, len(windows), chunk):
        send(windows[first : first + chunk])
        batches_process(worker="w")
        if rng.random() < 0.3:
            derived_process(limit=3)
    derived_drain(limit=3)
    assert marks() == []


def marks() -> list[tuple[object, dt.datetime]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT gpu_id, hour FROM telemetry_derivedwork ORDER BY gpu_id, hour")
        return list(cursor.fetchall())


def rollup_rows():
    return sorted(
        HourlyRollup.objects.values_list(
            "gpu_id", "hour", "windows", "seconds_up", "seconds_degraded", "seconds_down",
            "util_gpu_seconds", "energy_kwh", "temp_max_c", "ecc_corrected", "ecc_uncorrected",
            "xid_events",
        )
    )  # fmt: skip


def transition_rows():
    return sorted(GpuStateTransition.objects.values_list("gpu_id", "state", "at", "reason"))


def side_connection() -> psycopg.Connection:
    """A second session on the test database, as another worker would have."""
    from django.conf import settings

    return psycopg.connect(database_url(settings.DATABASES["default"]))


@pytest.mark.usefixtures("now")
def test_the_window_path_only_marks_and_the_pass_computes_and_clears(node, post):
    g0, g1 = node.gpus
    send(post, node, [window(g0.nvml_uuid, at(m)) for m in (58, 59, 60)]
         + [window(g1.nvml_uuid, at(5))])  # fmt: skip
    batches_process(worker="w")
    assert HourlyRollup.objects.count() == 0
    assert GpuStateTransition.objects.count() == 0
    assert sorted(marks(), key=str) == sorted(
        [(g0.id, T0), (g0.id, T0 + HOUR), (g1.id, T0)], key=str
    )
    result = derived_process(limit=100)
    assert (result.claimed, result.rollups, result.busy) == (3, 3, False)
    assert marks() == []
    rollups = HourlyRollup.objects.order_by("hour", "gpu_id")  # gpu_id: not Gpu's ordering
    assert [(r.gpu_id, r.hour, r.windows) for r in rollups] == sorted(
        [(g0.id, T0, 2), (g1.id, T0, 1), (g0.id, T0 + HOUR, 1)], key=lambda r: (r[1], r[0])
    )
    assert transition_rows() == sorted([(g0.id, "up", at(58), ""), (g1.id, "up", at(5), "")])


@pytest.mark.usefixtures("now")
def test_derived_pending_answers_for_a_range_until_the_pass_has_run(node, post):
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(10))])
    batches_process(worker="w")
    assert derived_pending(start=T0, end=T0 + HOUR) == 1
    # A late window changes the next energy reading's delta however much later: a range
    # starting after the marked hour, at any distance, is not settled either.
    assert derived_pending(start=T0 + dt.timedelta(days=1), end=T0 + dt.timedelta(days=3)) == 1
    assert derived_pending(start=T0 + dt.timedelta(days=30), end=T0 + dt.timedelta(days=31)) == 1
    assert derived_pending(start=T0 - HOUR, end=T0) == 0
    health = ingest_health(now=NOW)
    assert health.derived_pending == 1
    assert health.derived_oldest_at is not None  # the database's clock, not the frozen one
    derived_drain(limit=100)
    assert derived_pending(start=T0, end=T0 + HOUR) == 0
    assert ingest_health(now=NOW).derived_pending == 0


@pytest.mark.usefixtures("now")
def test_incremental_with_deferred_partial_passes_equals_a_rebuild(node, post):
    """Windows shuffled over 3 hours, counter resets and gaps, delivered in many batches; the
    derived pass runs only now and then, taking 3 marks at a time (islands split across
    passes). Rollups equal a rebuild; transitions equal a full recompute of every hour."""
    rng = random.Random(11)
    windows = []
    for g in node.gpus:
        energy = 0
        for m in range(180):
            if rng.random() < 0.15:
                continue
            energy = rng.randrange(10**6) if rng.random() < 0.03 else energy + rng.randrange(10**7)
            windows.append(window(g.nvml_uuid, at(m), energy_mj=energy, ecc_corrected=m // 9,
                                  state=rng.choice(["up", "up", "degraded", "down"])))  # fmt: skip
    deliver_shuffled(rng, windows, chunk=29, send=lambda part: send(post, node, part))
    incremental, transitions = rollup_rows(), transition_rows()
    assert len(incremental) == 2 * 3
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + 3 * HOUR)
    assert rollup_rows() == incremental
    # Transitions: mark every hour again and recompute from nothing.
    GpuStateTransition.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_derivedwork (gpu_id, hour, lo) SELECT gpu_id, "
            "date_trunc('hour', window_start, 'UTC'), min(window_start) "
            "FROM telemetry_window GROUP BY 1, 2"
        )
    derived_drain(limit=1000)
    assert transition_rows() == transitions
    assert rollup_rows() == incremental


@pytest.mark.usefixtures("now")
def test_a_stale_no_data_survives_a_pass_that_runs_after_it(node, post):
    """Beat may date a node's silence before the pass has looked at its last windows."""
    from telemetry.services import upkeep

    g0 = node.gpus[0]
    last = NOW.replace(second=0) - dt.timedelta(minutes=10)
    send(post, node, [window(g0.nvml_uuid, last - dt.timedelta(minutes=m)) for m in (2, 1, 0)])
    batches_process(worker="w")
    assert upkeep.nodes_mark_stale(now=NOW + dt.timedelta(minutes=5))
    derived_drain(limit=100)
    states = [(t.state, t.at) for t in GpuStateTransition.objects.filter(gpu=g0).order_by("at")]
    assert states == [("up", last - dt.timedelta(minutes=2)), ("no_data", last + MINUTE)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")
def test_a_pass_skips_marks_whose_windows_are_not_committed(post):
    """A window transaction holds a mark it met (ON CONFLICT … WHERE false locks it): the
    pass must not clear it before those windows are visible."""
    from telemetry.testing import fleet_node

    node = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(0))])
    batches_process(worker="w")
    with side_connection() as other:
        other.execute(
            "INSERT INTO telemetry_derivedwork AS d (gpu_id, hour, lo) VALUES (%s, %s, %s) "
            "ON CONFLICT (gpu_id, hour) DO UPDATE SET lo = EXCLUDED.lo WHERE EXCLUDED.lo < d.lo",
            [g0.id, T0, at(0)],
        )  # its windows are not committed yet; the mark covers them already: locked only
        assert derived_process(limit=100).claimed == 0
        assert HourlyRollup.objects.count() == 0
        other.commit()
    assert derived_process(limit=100).claimed == 1
    assert HourlyRollup.objects.get().windows == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")
def test_a_window_arriving_while_its_hour_is_recomputed_is_not_lost(post):
    """The pass holds the hour's mark and computes from a snapshot without the new window;
    the window's transaction waits for the pass, then leaves a fresh mark."""
    from telemetry.testing import fleet_node

    node = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(0), energy_mj=1_000)])
    batches_process(worker="w")
    send(post, node, [window(g0.nvml_uuid, at(1), energy_mj=3_600_001_000)])  # +1 kWh
    with side_connection() as stale_pass:
        # A pass in flight: it claimed the mark (and took the lock) before the new window,
        # with a new pass number, so the window path writes the mark again.
        stale_pass.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK])
        stale_pass.execute(
            "SELECT pg_advisory_lock(%s), nextval('telemetry_derived_pass_seq')", [MARKS_LOCK]
        )
        stale_pass.execute("SELECT 1 FROM telemetry_derivedwork FOR UPDATE SKIP LOCKED")
        stale_pass.execute("SELECT pg_advisory_unlock(%s)", [MARKS_LOCK])
        writer = threading.Thread(target=_process_in_thread)
        writer.start()
        writer.join(timeout=2)
        assert writer.is_alive(), "the window transaction should wait for the pass's mark"
        assert derived_process(limit=100).busy  # one pass at a time
        # The in-flight pass finishes: recomputes from what it saw, clears its mark.
        stale_pass.execute(
            "INSERT INTO telemetry_hourlyrollup (gpu_id, hour, windows, seconds_up, "
            "seconds_degraded, seconds_down, util_gpu_seconds, energy_kwh, ecc_corrected, "
            "ecc_uncorrected, xid_events, computed_at) "
            "VALUES (%s, %s, 1, 60, 0, 0, 3000, 0, 0, 0, 0, now())",
            [g0.id, T0],
        )
        stale_pass.execute("DELETE FROM telemetry_derivedwork")
        stale_pass.commit()
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert marks() == [(g0.id, T0)]  # a fresh mark: the new window is not forgotten
    derived_drain(limit=100)
    rollup = HourlyRollup.objects.get()
    assert (rollup.windows, str(rollup.energy_kwh)) == (2, "1.000000000")


def _process_in_thread() -> None:
    try:
        batches_process(worker="writer")
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")
def test_concurrent_passes_claim_each_mark_once(post):
    from telemetry.testing import fleet_node

    node = fleet_node(gpus=8, placed_from=T0 - dt.timedelta(days=3))
    send(post, node, [window(g.nvml_uuid, at(m)) for g in node.gpus for m in range(0, 600, 7)])
    batches_process(worker="w")
    expected = len(marks())
    assert expected == 8 * 10
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def drain() -> None:
        try:
            barrier.wait()
            while True:  # a busy pass would be re-queued by its task: here, retry at once
                result = derived_drain(limit=5)
                with lock:
                    claimed.append(result.claimed)
                if not result.busy or not marks():
                    return
        finally:
            connections.close_all()

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sum(claimed) == expected
    assert marks() == []
    incremental = rollup_rows()
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + 10 * HOUR)
    assert rollup_rows() == incremental


# Partial windows (schema 2): only the observed seconds of a minute count, and transitions are
# dated where observing began and stopped.


def v2(gpu_uuid, start, span=(0, 60), state="up", util=50.0, **overrides):
    """A schema-2 window observed over ``span`` seconds of its minute."""
    measured = util is not None
    return window(
        gpu_uuid, start, state=state, observed_from=span[0], observed_to=span[1],
        util_gpu={"min": 0.0, "avg": util, "max": 100.0} if measured else None,
        util_mem=overrides.pop("util_mem", None), util_method="buffer" if measured else None,
        **overrides,
    )  # fmt: skip


def send_v2(post, node, windows, events=None):
    document = {**batch_document(node=node, windows=windows, events=events), "schema": 2}
    response = post(node, document)
    assert response.status_code == 202, response.json()


def seconds(n: int) -> dt.timedelta:
    return dt.timedelta(seconds=n)


def timeline(gpu):
    """The GPU's transitions in time order: (state, at, reason)."""
    return list(
        GpuStateTransition.objects.filter(gpu=gpu)
        .order_by("at")
        .values_list("state", "at", "reason")
    )


# An hour of one GPU: started mid-minute, stopped mid-minute, restarted mid-minute, a stop of
# 30 s between two minutes, and the minutes in between observed whole.
PARTIAL = [  # minute, span, state, util
    (0, (25, 60), "up", 50.0),
    (1, (0, 60), "up", 40.0),
    (2, (0, 20), "up", 10.0),
    (5, (10, 60), "degraded", 30.0),
    (6, (0, 60), "down", None),
    (7, (0, 60), "up", 20.0),
    (8, (0, 30), "up", 60.0),
    (9, (0, 60), "up", 50.0),
]
PARTIAL_TRANSITIONS = [
    ("up", at(0) + seconds(25), ""),
    ("no_data", at(2) + seconds(20), "no telemetry"),
    ("degraded", at(5) + seconds(10), "row_remap_pending"),
    ("down", at(6), "gpu_is_lost"),
    ("up", at(7), ""),
    ("no_data", at(8) + seconds(30), "no telemetry"),
    ("up", at(9), ""),
]


@pytest.mark.usefixtures("now")
@pytest.mark.parametrize("late", [(), (1,), (5, 6, 7), (0, 9), (2, 5)])
def test_partial_windows_count_their_observed_seconds_and_date_their_transitions(node, post, late):
    """Whatever arrives late (the pass having run in between), the hour's rollup counts only
    observed seconds and the transitions are exactly those of the contract: none lost next
    to a window that began observing mid-minute, none left over."""
    g0 = node.gpus[0]
    windows = {m: v2(g0.nvml_uuid, at(m), span, state, util) for m, span, state, util in PARTIAL}
    send_v2(post, node, [w for m, w in windows.items() if m not in late])
    batches_process(worker="w")
    derived_drain(limit=100)
    if late:
        send_v2(post, node, [windows[m] for m in late])
        batches_process(worker="w")
        derived_drain(limit=100)
    rollup = HourlyRollup.objects.get(gpu=g0)
    # up: 35 + 60 + 20 + 60 + 30 + 60; busy: 50×35 + 40×60 + 10×20 + 30×50 + 20×60 + 60×30 + 50×60
    assert (rollup.windows, rollup.seconds_up, rollup.seconds_degraded, rollup.seconds_down) == (
        8, 265, 50, 60
    )  # fmt: skip
    assert str(rollup.util_gpu_seconds) == "11850.000"
    assert timeline(g0) == PARTIAL_TRANSITIONS
    incremental = rollup_rows()
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + HOUR)
    assert rollup_rows() == incremental


@pytest.mark.usefixtures("now")
def test_a_late_window_before_one_that_began_mid_minute_in_the_next_hour(node, post):
    """The first window after an island (n) began observing mid-minute: its transition is
    inside its minute, and is recomputed, not kept twice or dropped."""
    gpu = node.gpus[0]
    g0 = gpu.nvml_uuid
    send_v2(post, node, [v2(g0, at(57)), v2(g0, at(60), (15, 60), "down", None)])
    batches_process(worker="w")
    derived_drain(limit=100)
    assert [(s, a) for s, a, _ in timeline(gpu)] == [
        ("up", at(57)), ("no_data", at(58)), ("down", at(60) + seconds(15))
    ]  # fmt: skip
    send_v2(post, node, [v2(g0, at(58)), v2(g0, at(59), (0, 60), "down", None)])
    batches_process(worker="w")
    derived_drain(limit=100)
    assert [(s, a) for s, a, _ in timeline(gpu)] == [
        ("up", at(57)), ("down", at(59)), ("no_data", at(60)), ("down", at(60) + seconds(15))
    ]  # fmt: skip
    rollups = {r.hour: r for r in HourlyRollup.objects.all()}
    assert (rollups[T0].seconds_up, rollups[T0].seconds_down) == (120, 60)
    assert (rollups[T0 + HOUR].seconds_up, rollups[T0 + HOUR].seconds_down) == (0, 45)


def expected_transitions(windows):
    """The contract, written plainly: a window's state begins at window_start +
    observed_from; no_data begins at window_start + observed_to unless the next window begins
    observing at that instant; a transition only where the state changes or data resumes."""
    out: list[tuple[str, str, dt.datetime, str]] = []
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for w in windows:
        by_gpu.setdefault(w["gpu_uuid"], []).append(w)
    for gpu_uuid, ws in by_gpu.items():
        prev_end = prev_state = None
        for w in sorted(ws, key=lambda w: w["window_start"]):
            start = dt.datetime.fromisoformat(w["window_start"])
            begins = start + seconds(w["observed_from"])
            if prev_end is not None and begins > prev_end:
                out.append((gpu_uuid, "no_data", prev_end, "no telemetry"))
            if prev_end is None or begins > prev_end or w["state"] != prev_state:
                out.append((gpu_uuid, w["state"], begins, w["state_reason"] or ""))
            prev_end, prev_state = start + seconds(w["observed_to"]), w["state"]
    return sorted(out)


@pytest.mark.usefixtures("now")
def test_incremental_passes_over_partial_windows_equal_a_rebuild_and_the_contract(node, post):
    """Shuffled delivery of partly observed minutes, gaps, resets; the pass now and then, 3
    marks at a time. Rollups equal a rebuild and a plain sum of observed seconds; transitions
    equal the contract's, computed here without SQL."""
    rng = random.Random(18)
    windows = []
    for g in node.gpus:
        energy = 0
        for m in range(180):
            if rng.random() < 0.1:
                continue
            span = (0, 60)
            if rng.random() < 0.3:
                lo = rng.choice([0, 0, rng.randrange(1, 59)])
                span = (lo, rng.choice([60, rng.randrange(lo + 1, 61)]))
            state = rng.choice(["up", "up", "degraded", "down"])
            util = None if state == "down" else rng.randrange(0, 100_000) / 1000
            energy = rng.randrange(10**6) if rng.random() < 0.03 else energy + rng.randrange(10**7)
            windows.append(v2(g.nvml_uuid, at(m), span, state, util, energy_mj=energy))
    deliver_shuffled(rng, windows, chunk=23, send=lambda part: send_v2(post, node, part))
    nvml = {g.id: g.nvml_uuid for g in node.gpus}
    assert sorted((nvml[g], s, a, r) for g, s, a, r in transition_rows()) == (
        expected_transitions(windows)
    )
    incremental = rollup_rows()
    sums: dict[tuple[str, dt.datetime], tuple[int, int, int, Decimal]] = {}
    for w in windows:
        start = dt.datetime.fromisoformat(w["window_start"])
        key = (w["gpu_uuid"], start.replace(minute=0))
        up, degraded, down, busy = sums.get(key, (0, 0, 0, Decimal(0)))
        observed = w["observed_to"] - w["observed_from"]
        if w["state"] != "down":
            busy += Decimal(str(w["util_gpu"]["avg"])) * observed
        up += observed if w["state"] == "up" else 0
        degraded += observed if w["state"] == "degraded" else 0
        down += observed if w["state"] == "down" else 0
        sums[key] = (up, degraded, down, busy)
    assert {(nvml[r[0]], r[1]): (r[3], r[4], r[5], r[6]) for r in incremental} == sums
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + 3 * HOUR)
    assert rollup_rows() == incremental

"""The derived pass: marks left by the window path, claimed once, recomputed set-based, and
the races between a pass and the windows that keep arriving."""

from __future__ import annotations

import datetime as dt
import random
import threading

import psycopg
import pytest
from django.db import connection, connections

from telemetry.models import GpuStateTransition, HourlyRollup
from telemetry.selectors import derived_pending, ingest_health
from telemetry.services.derived import PASS_LOCK, derived_drain, derived_process, rollups_rebuild
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
    # A late window changes the next window's energy delta up to 2 days later: a range
    # starting after the marked hour, within that reach, is not settled either.
    assert derived_pending(start=T0 + dt.timedelta(days=1), end=T0 + dt.timedelta(days=3)) == 1
    assert derived_pending(start=T0 + dt.timedelta(days=3), end=T0 + dt.timedelta(days=4)) == 0
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
    rng.shuffle(windows)
    for start in range(0, len(windows), 29):
        send(post, node, windows[start : start + 29])
        batches_process(worker="w")
        if rng.random() < 0.3:
            derived_process(limit=3)
    derived_drain(limit=3)
    assert marks() == []
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
        # A pass in flight: it claimed the mark (and took the lock) before the new window.
        stale_pass.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK])
        stale_pass.execute("SELECT 1 FROM telemetry_derivedwork FOR UPDATE SKIP LOCKED")
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

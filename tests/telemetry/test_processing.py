"""The worker: claims, validation with recorded rejections, COPY, events, transitions, rollups."""

from __future__ import annotations

import datetime as dt
import random
import time
from decimal import Decimal

import pytest
from django.db import connection

from telemetry.agent.events import EVENT_KINDS as AGENT_EVENT_KINDS
from telemetry.models import (
    GpuStateTransition,
    HourlyRollup,
    IngestBatch,
    IngestClaim,
    QueuedBatch,
    RejectedRecord,
    TelemetryEvent,
    TelemetryWindow,
)
from telemetry.services.derived import derived_drain, rollups_rebuild
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, event, uuid7, window
from tests.telemetry.conftest import NOW, undecodable_batch_stored

pytestmark = pytest.mark.usefixtures("now")
T0 = dt.datetime(2026, 11, 21, 9, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


def at(minutes: int) -> dt.datetime:
    return T0 + minutes * MINUTE


def send(post, node, windows, events=None):
    response = post(node, batch_document(node=node, windows=windows, events=events))
    assert response.status_code == 202, response.json()
    return response


def process():
    """The worker's window path, then the derived pass it queues."""
    result = batches_process(worker="test-worker")
    derived_drain(limit=1000)
    return result


def transitions(gpu):
    return [
        (t.state, t.at, t.reason) for t in GpuStateTransition.objects.filter(gpu=gpu).order_by("at")
    ]


def test_valid_windows_are_stored_and_bad_ones_recorded_with_reasons(node, post):
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    send(
        post,
        node,
        [
            window(g0, at(0)),
            window("GPU-not-here", at(0)),
            window(g1, NOW.replace(second=0) + dt.timedelta(minutes=6)),
            window(g1, at(0), samples_ok=13),
            window(g1, at(1), util_gpu={"min": 70, "avg": 50, "max": 90}),
            window(g1, at(2), mem_used_bytes={"min": 1, "avg": 2, "max": 100 << 30}),
        ],
    )
    result = process()
    assert (result.processed, result.windows, result.rejected) == (1, 1, 5)
    assert list(TelemetryWindow.objects.values_list("gpu_id", "window_start")) == [
        (node.gpus[0].id, at(0))
    ]
    rejected = list(
        RejectedRecord.objects.order_by("index").values_list("index", "reason", "gpu_uuid")
    )
    assert rejected == [
        (1, "not_placed", "GPU-not-here"),
        (2, "future", g1),
        (3, "impossible_value", g1),
        (4, "impossible_value", g1),
        (5, "impossible_value", g1),
    ]
    assert "samples_ok 13 > samples_expected 12" in RejectedRecord.objects.get(index=3).detail
    batch = IngestBatch.objects.get()
    assert (batch.status, batch.accepted_windows, batch.rejected_count) == ("processed", 1, 5)


def test_a_window_before_the_gpu_was_placed_is_rejected(db, post):
    from telemetry.testing import fleet_node

    node = fleet_node(gpus=1, placed_from=at(10))
    send(
        post, node, [window(node.gpus[0].nvml_uuid, at(9)), window(node.gpus[0].nvml_uuid, at(10))]
    )
    process()
    assert TelemetryWindow.objects.count() == 1
    assert RejectedRecord.objects.get().reason == "not_placed"


def test_windows_and_events_are_idempotent_across_batches(node, post):
    g0 = node.gpus[0].nvml_uuid
    xid = event("xid", at(0) + dt.timedelta(seconds=7), gpu_uuid=g0, xid=79)
    send(post, node, [window(g0, at(0)), window(g0, at(1))], [xid])
    process()
    # The agent re-sends the same window and event in a new batch (after a dead-letter, say).
    send(post, node, [window(g0, at(1)), window(g0, at(2))], [xid])
    result = process()
    assert result.windows == 2
    assert TelemetryWindow.objects.count() == 3
    assert TelemetryEvent.objects.count() == 1
    assert HourlyRollup.objects.get().xid_events == 1


@pytest.mark.parametrize("optimistic", [True, False])
def test_the_worker_stores_each_window_as_a_plain_copy_of_its_row_would(node, post, optimistic):
    """The worker's COPY sends the two ids as raw bytes (``WINDOW_WIRE_TYPES``): every
    stored column equals what a COPY of the same row with uuid.UUID ids stores."""
    from telemetry.schema import batch_decode_gzip
    from telemetry.services.processing import WINDOW_COLUMNS, WINDOW_TYPES, _window_row

    g0, g1 = node.gpus[0], node.gpus[1]
    send(post, node, [
        window(g0.nvml_uuid, at(0)),
        window(g1.nvml_uuid, at(0), state="down", state_reason="xid:79", util_gpu=None,
               power_w=None, energy_mj=None, remapped_rows_pending=1, recovery_action=2),
        window(g1.nvml_uuid, at(1), state="degraded", mem_total_bytes=None, temp_c=None),
    ])  # fmt: skip
    assert batches_process(worker="test-worker", optimistic_copy=optimistic).windows == 3
    columns = ", ".join(WINDOW_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM telemetry_window ORDER BY gpu_id, window_start")  # noqa: S608
        stored = cursor.fetchall()
        batch = IngestBatch.objects.select_related("raw").get()
        ids = {g.nvml_uuid: g.id for g in node.gpus}
        cursor.execute("CREATE TEMP TABLE plain_copy (LIKE telemetry_window)")
        with cursor.cursor.copy(f"COPY plain_copy ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(WINDOW_TYPES)
            for w in batch_decode_gzip(bytes(batch.raw.body), limit=1 << 20).windows:
                copy.write_row(_window_row(w, ids[w.gpu_uuid], node.id, batch.pk))
        cursor.execute(f"SELECT {columns} FROM plain_copy ORDER BY gpu_id, window_start")  # noqa: S608
        plain = cursor.fetchall()
        cursor.execute("DROP TABLE plain_copy")
    assert stored == plain
    assert [row[0] for row in stored] == sorted([g0.id, g1.id, g1.id])
    assert {row[2] for row in stored} == {node.id}


def test_an_unknown_event_kind_is_rejected_alone(node, post):
    g0 = node.gpus[0].nvml_uuid
    send(
        post,
        node,
        [window(g0, at(0))],
        [event("gpu_exploded", at(0)), event("nvml_available", at(0), detail={"after_s": 3})],
    )
    result = process()
    assert (result.windows, result.rejected) == (1, 1)
    assert list(TelemetryEvent.objects.values_list("kind", flat=True)) == ["nvml_available"]
    assert RejectedRecord.objects.get().reason == "unknown_kind"


def test_every_event_kind_the_agent_sends_is_kept(node, post):
    """The agent's kinds (``telemetry.agent.events``) against what the server keeps: a kind
    the agent sends and the server does not know is accepted, then rejected alone — lost
    (``spool_quarantined`` was, until this test)."""
    g0 = node.gpus[0].nvml_uuid
    events = [
        event(kind, at(0), gpu_uuid=g0, **({"xid": 79} if kind == "xid" else {}))
        for kind in AGENT_EVENT_KINDS
    ]
    send(post, node, [window(g0, at(0))], events)
    result = process()
    assert list(RejectedRecord.objects.values_list("reason", "detail")) == []
    assert result.rejected == 0
    assert sorted(TelemetryEvent.objects.values_list("kind", flat=True)) == sorted(
        AGENT_EVENT_KINDS
    )


def test_an_event_sent_twice_keeps_its_first_copy(node, post):
    """docs/agent.md 5.3: the server keeps the first event of a (node, event_id) — within one
    batch too, where the copies once tied in the insert's order and either could win."""
    ids = [str(uuid7(int(at(0).timestamp() * 1000) + i)) for i in range(20)]
    first = [event("nvml_stall", at(0), event_id=i, detail={"copy": "A"}) for i in ids]
    again = [event("nvml_stall", at(0), event_id=i, detail={"copy": "B"}) for i in ids]
    send(post, node, [], first + again)
    send(post, node, [], [event("nvml_stall", at(0), event_id=ids[0], detail={"copy": "C"})])
    result = process()
    assert result.rejected == 0
    kept = TelemetryEvent.objects.values_list("event_id", "detail")
    assert sorted((str(e), d["copy"]) for e, d in kept) == sorted((i, "A") for i in ids)


def test_the_body_the_agent_sends_is_accepted(node, post):
    """The agent (docs/agent.md) sends sealed_at instead of sent_at, no node_id, a gpus list
    and a few extra window fields: all accepted."""
    document = batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, at(0),
                              remapped_rows_failure=False, retired_pages_pending=False,
                              power_w={"min": 1.0, "avg": 2.0, "max": 3.0})])  # fmt: skip
    del document["sent_at"], document["node_id"]
    document["sealed_at"] = "2026-11-21T11:59:59.123Z"
    document["agent"]["hostname"] = "gpu-1"
    document["gpus"] = [{"gpu_uuid": node.gpus[0].nvml_uuid, "serial": "1650", "name": "H100"}]
    response = post(node, document)
    assert response.status_code == 202, response.json()
    assert process().windows == 1


def test_state_changes_are_dated_when_the_telemetry_says(node, post):
    g0 = node.gpus[0]
    send(
        post,
        node,
        [
            window(g0.nvml_uuid, at(0)),
            window(g0.nvml_uuid, at(1), state="down", state_reason="gpu_is_lost"),
            window(g0.nvml_uuid, at(2), state="down", state_reason="gpu_is_lost"),
            window(g0.nvml_uuid, at(3)),
            # minutes 4-6 missing: no data from the end of minute 3
            window(g0.nvml_uuid, at(7), state="degraded", state_reason="row_remap_pending"),
        ],
    )
    process()
    assert transitions(g0) == [
        ("up", at(0), ""),
        ("down", at(1), "gpu_is_lost"),
        ("up", at(3), ""),
        ("no_data", at(4), "no telemetry"),
        ("degraded", at(7), "row_remap_pending"),
    ]


def test_late_windows_that_fill_a_gap_rewrite_its_transitions(node, post):
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(m)) for m in (0, 1, 4, 5)])
    process()
    assert transitions(g0) == [
        ("up", at(0), ""),
        ("no_data", at(2), "no telemetry"),
        ("up", at(4), ""),
    ]
    send(post, node, [window(g0.nvml_uuid, at(2)), window(g0.nvml_uuid, at(3), state="down")])
    process()
    assert transitions(g0) == [("up", at(0), ""), ("down", at(3), "gpu_is_lost"), ("up", at(4), "")]


def test_energy_deltas_handle_counter_resets(node, post):
    g0 = node.gpus[0]
    mj = 3_600_000  # 0.001 kWh
    counters = [
        100 * mj,
        101 * mj,
        103 * mj,
        2 * mj,
        4 * mj,
    ]  # reset (driver reload) before the 4th
    send(post, node, [window(g0.nvml_uuid, at(m), energy_mj=c) for m, c in enumerate(counters)])
    process()
    rollup = HourlyRollup.objects.get(gpu=g0)
    # 1 + 2 + (2 since the reset) + 2 = 7 thousandths of a kWh; the first window has no base.
    assert rollup.energy_kwh == Decimal("0.007000000")


def test_energy_across_an_hour_boundary_counts_from_the_previous_hour(node, post):
    g0 = node.gpus[0]
    mj = 3_600_000
    send(post, node, [window(g0.nvml_uuid, at(59), energy_mj=10 * mj)])
    process()
    send(post, node, [window(g0.nvml_uuid, at(60), energy_mj=15 * mj)])
    process()
    assert [r.energy_kwh for r in HourlyRollup.objects.filter(gpu=g0).order_by("hour")] == [
        Decimal("0E-9"),
        Decimal("0.005000000"),
    ]


def test_rollups_are_exact(node, post):
    g0 = node.gpus[0]
    send(
        post,
        node,
        [
            window(g0.nvml_uuid, at(0), util_gpu={"min": 0, "avg": 10.5, "max": 20}),
            window(
                g0.nvml_uuid, at(1), state="degraded", util_gpu={"min": 0, "avg": 30, "max": 40}
            ),
            window(
                g0.nvml_uuid,
                at(2),
                state="down",
                util_gpu=None,
                temp_c={"min": 1, "avg": 2, "max": 90},
            ),
            window(g0.nvml_uuid, at(3), ecc_corrected=5, ecc_uncorrected=1),
        ],
        [event("xid", at(2), gpu_uuid=g0.nvml_uuid, xid=79), event("nvml_stall", at(2))],
    )
    process()
    r = HourlyRollup.objects.get(gpu=g0)
    assert (r.hour, r.windows, r.seconds_up, r.seconds_degraded, r.seconds_down) == (
        T0,
        4,
        120,
        60,
        60,
    )
    assert r.util_gpu_seconds == Decimal("5430.000")  # (10.5 + 30 + 50) x 60 over up/degraded
    assert (r.temp_max_c, r.ecc_corrected, r.ecc_uncorrected, r.xid_events) == (90.0, 5, 1, 1)


def _rollup_rows():
    return sorted(
        HourlyRollup.objects.values_list(
            "gpu_id", "hour", "windows", "seconds_up", "seconds_degraded", "seconds_down",
            "util_gpu_seconds", "energy_kwh", "temp_max_c", "ecc_corrected", "ecc_uncorrected",
            "xid_events",
        )
    )  # fmt: skip


def test_incremental_rollups_equal_a_rebuild_after_out_of_order_delivery(node, post):
    rng = random.Random(5)
    windows = []
    for g in node.gpus:
        energy = 0
        for m in range(240):
            if rng.random() < 0.1:
                continue  # gaps
            energy = (
                rng.randrange(0, 10**6) if rng.random() < 0.02 else energy + rng.randrange(10**7)
            )
            windows.append(
                window(
                    g.nvml_uuid,
                    at(m),
                    state=rng.choice(["up", "up", "up", "degraded", "down"]),
                    energy_mj=energy,
                    ecc_corrected=m // 7,
                    util_gpu={"min": 0, "avg": round(rng.uniform(0, 100), 3), "max": 100},
                )
            )
    rng.shuffle(windows)
    for start in range(0, len(windows), 37):
        send(post, node, windows[start : start + 37])
        if rng.random() < 0.5:
            process()
    process()
    incremental = _rollup_rows()
    incremental_transitions = sorted(
        GpuStateTransition.objects.values_list("gpu_id", "state", "at")
    )
    assert len(incremental) == 2 * 4
    HourlyRollup.objects.all().delete()
    rollups_rebuild(start=T0, end=T0 + dt.timedelta(hours=4))
    assert _rollup_rows() == incremental
    # Transitions too: delivered in one ordered batch, they come out the same.
    GpuStateTransition.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_window")
    windows.sort(key=lambda w: (w["gpu_uuid"], w["window_start"]))
    send(post, node, windows)
    process()
    assert (
        sorted(GpuStateTransition.objects.values_list("gpu_id", "state", "at"))
        == incremental_transitions
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")  # the session's real worker must not take it
def test_a_held_batch_is_skipped_and_a_lost_workers_batch_comes_back(node, post, settings):
    """Worker a (another connection) holds the batch in its chunk's transaction, with its
    claim row committed aside, as ``batches_process`` does; then its connection dies."""
    import psycopg

    from telemetry.selectors import ingest_health
    from tests.conftest import database_url

    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    batch = IngestBatch.objects.get()
    url = database_url(settings.DATABASES["default"])
    with psycopg.connect(url, autocommit=True) as aside:
        (claim_id,) = aside.execute(  # type: ignore[misc]
            "INSERT INTO telemetry_ingestclaim (worker, claimed_at, batch_ids) "
            "VALUES ('a', now() - interval '1 minute', ARRAY[%s]::bigint[]) RETURNING id",
            [batch.id],
        ).fetchone()
    worker_a = psycopg.connect(url)
    try:
        worker_a.execute(
            "SELECT 1 FROM telemetry_queuedbatch WHERE batch_id = %s FOR UPDATE", [batch.id]
        )
        worker_a.execute("SELECT 1 FROM telemetry_ingestclaim WHERE id = %s FOR UPDATE", [claim_id])

        result = batches_process(worker="b")
        assert (result.claimed, result.processed, result.reaped) == (0, 0, 0)
        health = ingest_health(now=NOW)
        assert (health.pending, health.in_flight, health.abandoned_claims) == (1, 1, 0)
        assert [(w, n) for w, n, _ in health.workers] == [("a", 1)]
    finally:
        worker_a.close()  # killed: its transaction and locks are gone, its claim row stays
    # The close returns before PostgreSQL has ended the session (and dropped its locks).
    deadline = time.monotonic() + 30
    while ingest_health(now=NOW).in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    health = ingest_health(now=NOW)
    assert (health.pending, health.in_flight, health.abandoned_claims) == (1, 0, 1)
    result = batches_process(worker="b")
    assert (result.claimed, result.processed, result.windows, result.reaped) == (1, 1, 1, 1)
    batch.refresh_from_db()
    assert (batch.status, batch.attempts, batch.claimed_by) == ("processed", 1, "b")
    assert not IngestClaim.objects.exists()
    assert TelemetryWindow.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")  # the session's real worker must not take it
def test_a_worker_hung_mid_chunk_loses_its_batches_after_the_claim_timeout(
    node, post, settings, monkeypatch
):
    """A worker stuck in its own code (not in a query) holds its chunk's transaction open:
    the chunk set ``idle_in_transaction_session_timeout`` to the claim timeout, so PostgreSQL
    ends that session and the batch is another worker's to take, with nobody killing the
    stuck one. When it wakes, its next query fails and it commits nothing."""
    import threading

    from telemetry.services import processing

    settings.TELEMETRY_CLAIM_TIMEOUT_S = 1
    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    placements = processing._placements
    stuck = threading.Event()

    def hang_then_go_on(*args, **kwargs):
        if threading.current_thread().name == "hung-worker":
            stuck.set()
            time.sleep(3)  # three times the timeout, holding the claim
        return placements(*args, **kwargs)

    monkeypatch.setattr(processing, "_placements", hang_then_go_on)
    failures: list[BaseException] = []

    def hung_worker() -> None:
        try:
            processing.batches_process(worker="hung")
        except BaseException as exc:  # what the task would see (Celery retries it)
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=hung_worker, name="hung-worker")
    thread.start()
    assert stuck.wait(30)
    thread.join(60)
    assert not thread.is_alive()
    # It lost its session, which its task retries: not a bad batch to retry one by one and
    # set aside (a hang past the timeout in every retry would have made it "failed").
    assert len(failures) == 1
    assert isinstance(failures[0], processing.SESSION_LOST)
    result = batches_process(worker="survivor")
    assert (result.claimed, result.processed, result.windows) == (1, 1, 1)
    batch = IngestBatch.objects.get()
    assert (batch.status, batch.claimed_by) == ("processed", "survivor")
    assert TelemetryWindow.objects.count() == 1


def test_a_batch_that_keeps_killing_its_worker_is_set_aside(node, post, settings):
    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    send(post, node, [window(node.gpus[0].nvml_uuid, at(1))])
    doomed, fine = IngestBatch.objects.order_by("id")
    _attempts_lost(doomed, settings.TELEMETRY_MAX_ATTEMPTS - 1)
    with connection.cursor() as cursor:  # the claim of the worker it killed last
        cursor.execute(
            "INSERT INTO telemetry_ingestclaim (worker, claimed_at, batch_ids) "
            "VALUES ('a', now() - interval '1 minute', ARRAY[%s]::bigint[])",
            [doomed.pk],
        )
    result = batches_process(worker="b")
    assert (result.reaped, result.processed, result.windows) == (1, 1, 1)
    doomed.refresh_from_db()
    assert (doomed.status, doomed.attempts) == ("failed", settings.TELEMETRY_MAX_ATTEMPTS)
    assert "gave up" in doomed.error
    assert IngestBatch.objects.get(pk=fine.pk).status == "processed"
    assert not IngestClaim.objects.exists()
    # Set aside: out of the workers' queue, still counted as unfinished for operators.
    assert list(QueuedBatch.objects.values_list("batch_id", "failed", "attempts")) == [
        (doomed.pk, True, settings.TELEMETRY_MAX_ATTEMPTS)
    ]


def _attempts_lost(batch: IngestBatch, attempts: int) -> None:
    """The state the reaper leaves after ``attempts`` lost workers: counted on the batch and
    on its queue row."""
    IngestBatch.objects.filter(pk=batch.pk).update(attempts=attempts)
    QueuedBatch.objects.filter(batch_id=batch.pk).update(attempts=attempts)


def test_a_batch_that_lost_its_worker_is_claimed_alone(node, post):
    from telemetry.services.processing import _claim

    for minute in range(3):
        send(post, node, [window(node.gpus[0].nvml_uuid, at(minute))])
    _, second, _ = IngestBatch.objects.order_by("id")
    _attempts_lost(second, 1)
    import psycopg
    from django.db import transaction

    with transaction.atomic():
        cursor = psycopg.Cursor(connection.connection)
        taken = [row[0] for row in _claim(cursor, batches=10, windows=100, only=None)]
        assert taken == [second.pk]
    result = batches_process(worker="b")
    assert (result.claimed, result.processed) == (3, 3)


def test_node_status_tracks_last_seen_and_clock_skew(node, post):
    from telemetry.models import NodeStatus

    post(node, batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, at(0))]),
         timestamp=int(NOW.timestamp()) + 4)  # fmt: skip
    process()
    status = NodeStatus.objects.get(node=node.node)
    assert (status.last_seen_at, status.clock_skew_s, status.last_window_end) == (NOW, 4.0, at(1))
    assert status.agent_version == "0.1.0-test"


def test_a_node_seen_again_is_updated_in_place(node, post, now):
    """Every chunk updates its nodes' status — when each was last seen, a minute later each
    time — and no index covers the columns it changes, so each update after the first is
    heap-only (HOT): no index entry written per chunk (telemetry migration 0013)."""
    from django.db import connection

    from telemetry.models import NodeStatus

    for minute in range(4):
        send(post, node, [window(node.gpus[0].nvml_uuid, at(minute))])
        process()
        now.shift(dt.timedelta(minutes=1))
    assert NodeStatus.objects.get(node=node.node).last_seen_at == NOW + dt.timedelta(minutes=3)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(c.oid),"
            " pg_stat_get_xact_tuples_hot_updated(c.oid)"
            " FROM pg_class c WHERE c.relname = 'telemetry_nodestatus'"
        )
        updated, hot = cursor.fetchone()
    assert updated >= 3
    assert hot == updated


def test_a_set_aside_batch_is_counted_until_an_operator_requeues_it(node, post):
    """An undecodable body is set aside (failed) with its error: out of the workers' queue,
    still unfinished for the console and for a close. Re-queued, it is taken again."""
    from billing.selectors.pending import telemetry_pending
    from telemetry.selectors import ingest_health
    from telemetry.services.ingest import batches_requeue

    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    good = IngestBatch.objects.get()
    broken = undecodable_batch_stored(node)
    assert set(QueuedBatch.objects.values_list("batch_id", "failed")) == {
        (good.pk, False),
        (broken.pk, False),
    }

    result = process()
    assert (result.processed, result.failed) == (1, 1)
    broken.refresh_from_db()
    assert (broken.status, broken.claimed_by) == ("failed", "test-worker")
    assert "undecodable body" in broken.error
    assert list(QueuedBatch.objects.values_list("batch_id", "failed")) == [(broken.pk, True)]
    health = ingest_health(now=NOW)
    assert (health.pending, health.failed) == (0, 1)
    pending = telemetry_pending(start=NOW - dt.timedelta(hours=1), end=NOW + dt.timedelta(hours=1))
    assert (pending.pending, pending.failed) == (0, 1)
    assert process().claimed == 0  # set aside: no worker takes it again on its own

    assert batches_requeue(batch_ids=[broken.pk, good.pk]) == 1  # only failed ones
    broken.refresh_from_db()
    assert (broken.status, broken.error, broken.attempts) == ("pending", "", 0)
    assert list(QueuedBatch.objects.values_list("batch_id", "failed", "attempts")) == [
        (broken.pk, False, 0)
    ]
    assert ingest_health(now=NOW).pending == 1
    assert process().claimed == 1  # taken again (and, still undecodable, set aside again)
    assert IngestBatch.objects.get(pk=good.pk).status == "processed"


def test_the_queue_holds_exactly_the_unprocessed_batches(node, post):
    """Stored pending, a batch is queued by the statement that stores it; processed, its
    queue row goes in the same transaction."""
    for minute in range(5):
        send(post, node, [window(node.gpus[0].nvml_uuid, at(minute))])
    queued = set(QueuedBatch.objects.values_list("batch_id", "received_at"))
    assert queued == set(IngestBatch.objects.values_list("id", "received_at"))
    assert process().processed == 5
    assert not QueuedBatch.objects.exists()
    assert set(IngestBatch.objects.values_list("status", flat=True)) == {"processed"}


def test_a_chunk_that_fails_is_retried_batch_by_batch_and_the_bad_one_set_aside(
    node, post, monkeypatch
):
    """A bug or a bad row fails the chunk's transaction: its batches are retried one by one,
    the one that fails again is set aside with its error, and the others are processed."""
    import telemetry.services.processing as processing

    for minute in range(3):
        send(post, node, [window(node.gpus[0].nvml_uuid, at(minute))])
    _, poison, _ = IngestBatch.objects.order_by("id")

    def failing(validate):
        def checked(loaded, *args, **kwargs):
            if any(item.id == poison.pk for item in loaded):
                raise ValueError("a row this worker cannot build")
            return validate(loaded, *args, **kwargs)

        return checked

    # The chunk checks prepared rows; the batch-by-batch retry, decoded bodies.
    for name in ("_validate", "_validate_prepared"):
        monkeypatch.setattr(processing, name, failing(getattr(processing, name)))
    result = batches_process(worker="test-worker")
    assert (result.claimed, result.processed, result.failed, result.windows) == (3, 2, 1, 2)
    poison.refresh_from_db()
    assert (poison.status, poison.claimed_by) == ("failed", "test-worker")
    assert poison.error == "ValueError: a row this worker cannot build"
    assert list(QueuedBatch.objects.values_list("batch_id", "failed")) == [(poison.pk, True)]
    assert set(IngestBatch.objects.exclude(pk=poison.pk).values_list("status", flat=True)) == {
        "processed"
    }
    assert TelemetryWindow.objects.count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_queued_passes")  # the session's real worker must not take it
def test_a_failing_worker_does_not_set_aside_a_batch_another_worker_holds(node, post, settings):
    import psycopg

    from telemetry.services.processing import _batch_fail
    from tests.conftest import database_url

    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    batch = IngestBatch.objects.get()
    with psycopg.connect(database_url(settings.DATABASES["default"])) as other:
        other.execute(
            "SELECT 1 FROM telemetry_queuedbatch WHERE batch_id = %s FOR UPDATE", [batch.pk]
        )
        _batch_fail(batch_id=batch.pk, worker="a", error="boom")
    batch.refresh_from_db()
    assert (batch.status, batch.error) == ("pending", "")
    assert list(QueuedBatch.objects.values_list("batch_id", "failed")) == [(batch.pk, False)]
    _batch_fail(batch_id=batch.pk, worker="a", error="boom")  # nobody holds it now
    batch.refresh_from_db()
    assert (batch.status, batch.error) == ("failed", "boom")


def test_a_batch_stored_without_its_body_is_set_aside_not_left_queued(node, post):
    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    bodiless = IngestBatch.objects.create(
        node=node.node, batch_id="018f0000-0000-7000-8000-0000000000dd", body_sha256="0" * 64,
        signed_at=NOW, received_at=NOW, answer={},
    )  # fmt: skip
    result = process()
    assert (result.claimed, result.processed, result.failed) == (2, 1, 1)
    bodiless.refresh_from_db()
    assert (bodiless.status, bodiless.error) == ("failed", "no body stored")
    assert list(QueuedBatch.objects.values_list("batch_id", "failed")) == [(bodiless.pk, True)]


def test_a_chunk_commits_as_usual_while_redis_is_down(
    node, post, settings, django_capture_on_commit_callbacks, caplog
):
    """The derived pass's kick after a chunk's commit finds no Redis: the chunk stays done,
    not retried batch by batch, and its marks wait for the sweep."""
    send(post, node, [window(node.gpus[0].nvml_uuid, at(0))])
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:9/0"}
    }
    with django_capture_on_commit_callbacks(execute=True):
        result = batches_process(worker="test-worker")
    assert (result.processed, result.failed, result.windows) == (1, 0, 1)
    assert "derived pass not queued (Redis down" in caplog.text
    assert IngestBatch.objects.get().status == "processed"
    assert TelemetryWindow.objects.count() == 1
    derived_drain(limit=1000)
    assert HourlyRollup.objects.get().windows == 1


def test_windows_without_samples_or_with_clocks_or_power_out_of_order_are_rejected(node, post):
    g0 = node.gpus[0].nvml_uuid
    send(post, node, [
        window(g0, at(0), samples_ok=0, samples_expected=0),
        window(g0, at(1), clock_mem_mhz={"min": 9000.0, "avg": 100.0, "max": 5.0}),
        window(g0, at(2), power_w={"min": 900.0, "avg": 100.0, "max": 200.0}),
        window(g0, at(3)),
    ])  # fmt: skip
    result = process()
    assert (result.windows, result.rejected) == (1, 3)
    details = list(RejectedRecord.objects.order_by("index").values_list("reason", "detail"))
    assert [reason for reason, _ in details] == ["impossible_value"] * 3
    assert "samples_expected is 0" in details[0][1]
    assert "clock_mem_mhz: min 9000.0, avg 100.0, max 5.0" in details[1][1]
    assert "power_w: min 900.0 > avg 100.0" in details[2][1]
    assert list(TelemetryWindow.objects.values_list("window_start", flat=True)) == [at(3)]


def test_a_copy_of_a_stored_minute_that_says_otherwise_is_rejected_as_a_conflict(node, post):
    """The first copy stored wins; a later one that says the same is a replay (accepted),
    one that says anything else is a recorded ``conflict``, never silently dropped."""
    gpu = node.gpus[0]
    g0 = gpu.nvml_uuid
    # Two different windows for one minute in one batch: the first in the batch is kept.
    send(post, node, [window(g0, at(0)), window(g0, at(0), state="down", util_gpu=None)])
    result = process()
    assert (result.windows, result.rejected) == (1, 1)
    first = IngestBatch.objects.get()
    assert (first.accepted_windows, first.rejected_count) == (1, 1)
    conflict = RejectedRecord.objects.get()
    assert (conflict.reason, conflict.index, conflict.gpu_uuid) == ("conflict", 1, g0)
    assert f"already stored, with other values, from batch {first.pk}" in conflict.detail
    assert conflict.payload["state"] == "down"
    # A replay of the kept window, and a new minute: both accepted, nothing rejected.
    send(post, node, [window(g0, at(0)), window(g0, at(1))])
    assert (process().windows, RejectedRecord.objects.count()) == (2, 1)
    # A later batch that says something else about a stored minute: rejected, stored row kept.
    send(post, node, [window(g0, at(1), util_gpu={"min": 1.0, "avg": 2.0, "max": 3.0})])
    result = process()
    assert (result.windows, result.rejected) == (0, 1)
    assert RejectedRecord.objects.filter(reason="conflict").count() == 2
    stored = TelemetryWindow.objects.filter(gpu=gpu).order_by("window_start")
    assert [(w.state, w.util_gpu_avg) for w in stored] == [("up", 50.0), ("up", 50.0)]
    assert sum(IngestBatch.objects.values_list("accepted_windows", flat=True)) == 3


def test_a_stored_batch_with_another_utc_offset_is_filed_under_its_utc_day(db):
    """The endpoint now refuses offsets other than UTC; a batch stored before it did still
    goes to the partition of its UTC day, not of the day its offset names."""
    from django.utils import timezone

    from telemetry.schema import gzip_json
    from telemetry.services.partitions import partition_name
    from telemetry.testing import batches_stored, fleet_node

    node = fleet_node(gpus=1, placed_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    document = batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, at(0))])
    document["windows"][0]["window_start"] = "2026-09-14T22:00:00-05:00"  # 09-15 03:00Z
    body = gzip_json(document)
    batches_stored([(
        IngestBatch(node=node.node, batch_id=document["batch_id"], signed_at=timezone.now(),
                    received_at=timezone.now(), body_sha256="0" * 64, window_count=1, answer={}),
        body,
    )])  # fmt: skip
    assert process().windows == 1
    assert IngestBatch.objects.get().status == "processed"
    assert list(TelemetryWindow.objects.values_list("window_start", flat=True)) == [
        dt.datetime(2026, 9, 15, 3, 0, tzinfo=dt.UTC)
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [partition_name(dt.date(2026, 9, 15))])
        assert cursor.fetchone()[0] is not None

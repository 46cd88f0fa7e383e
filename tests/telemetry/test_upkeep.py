"""Beat's work: the outbox sweep, staleness, partitions and retention."""

from __future__ import annotations

import datetime as dt

import pytest

from telemetry.models import (
    BatchBody,
    GpuStateTransition,
    IngestBatch,
    NodeStatus,
    QueuedBatch,
    RejectedRecord,
)
from telemetry.services import upkeep
from telemetry.services.derived import derived_drain
from telemetry.services.partitions import window_partitions
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, window
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
T0 = NOW.replace(second=0) - dt.timedelta(minutes=10)


def test_the_sweep_counts_batches_whose_task_was_lost(node, post):
    post(node, batch_document(node=node, windows=[]))
    assert upkeep.batches_needing_work(now=NOW, older_than=dt.timedelta(minutes=2)) == 0
    later = NOW + dt.timedelta(minutes=3)
    assert upkeep.batches_needing_work(now=later, older_than=dt.timedelta(minutes=2)) == 1


def test_a_silent_node_turns_stale_from_when_its_data_stopped(node, post, now):
    g0 = node.gpus[0]
    post(
        node,
        batch_document(
            node=node,
            windows=[window(g0.nvml_uuid, T0 + dt.timedelta(minutes=m)) for m in range(3)],
        ),
    )
    batches_process(worker="w")
    derived_drain(limit=1000)
    assert upkeep.nodes_mark_stale(now=NOW + dt.timedelta(minutes=2)) == []
    stale = upkeep.nodes_mark_stale(now=NOW + dt.timedelta(minutes=3, seconds=1))
    assert [s.node_id for s in stale] == [str(node.id)]
    assert NodeStatus.objects.get(node=node.node).stale is True
    last = GpuStateTransition.objects.filter(gpu=g0).order_by("at").last()
    assert last is not None
    assert (last.state, last.at) == ("no_data", T0 + dt.timedelta(minutes=3))
    # Marked once: the next tick visits nothing.
    assert upkeep.nodes_mark_stale(now=NOW + dt.timedelta(minutes=10)) == []
    # It speaks again: fresh, and the gap it left is no_data up to its next window.
    now.move_to(NOW + dt.timedelta(minutes=20))
    post(
        node,
        batch_document(node=node, windows=[window(g0.nvml_uuid, T0 + dt.timedelta(minutes=25))]),
    )
    batches_process(worker="w")
    derived_drain(limit=1000)
    assert NodeStatus.objects.get(node=node.node).stale is False
    assert [(t.state, t.at) for t in GpuStateTransition.objects.filter(gpu=g0).order_by("at")] == [
        ("up", T0),
        ("no_data", T0 + dt.timedelta(minutes=3)),
        ("up", T0 + dt.timedelta(minutes=25)),
    ]


def test_a_stale_node_s_no_data_is_dated_where_its_last_observed_span_ended(node, post, now):
    """A schema-2 agent stopped 40 s into its last minute: the silence begins there, not at
    the minute's end; a pass that runs after beat keeps it; and when the agent comes back
    mid-minute, its GPU is up again from the second it began observing."""
    g0 = node.gpus[0]

    def v2(minute, span):
        return window(g0.nvml_uuid, T0 + dt.timedelta(minutes=minute), observed_from=span[0],
                      observed_to=span[1], util_method="buffer")  # fmt: skip

    def send(windows):
        document = {**batch_document(node=node, windows=windows), "schema": 2}
        assert post(node, document).status_code == 202
        batches_process(worker="w")

    send([v2(0, (0, 60)), v2(1, (0, 40))])
    assert [s.node_id for s in upkeep.nodes_mark_stale(now=NOW + dt.timedelta(minutes=4))] == [
        str(node.id)
    ]
    derived_drain(limit=1000)  # the pass that recomputes those windows runs after beat
    timeline = GpuStateTransition.objects.filter(gpu=g0).order_by("at")
    assert [(t.state, t.at, t.reason) for t in timeline] == [
        ("up", T0, ""),
        ("no_data", T0 + dt.timedelta(minutes=1, seconds=40), "node stale: no telemetry"),
    ]
    now.move_to(NOW + dt.timedelta(minutes=20))
    send([v2(25, (12, 60))])
    derived_drain(limit=1000)
    assert [(t.state, t.at) for t in timeline.all()] == [
        ("up", T0),
        ("no_data", T0 + dt.timedelta(minutes=1, seconds=40)),
        ("up", T0 + dt.timedelta(minutes=25, seconds=12)),
    ]


def test_partitions_are_created_ahead_and_dropped_after_retention(db, settings):
    settings.TELEMETRY_PARTITIONS_AHEAD_DAYS = 2
    settings.TELEMETRY_RAW_RETENTION_DAYS = 3
    created, dropped = upkeep.partitions_maintain(now=NOW - dt.timedelta(days=5))
    assert len(created) == 3 and dropped == []
    created, dropped = upkeep.partitions_maintain(now=NOW)
    today = NOW.date()
    assert dropped == [today - dt.timedelta(days=5), today - dt.timedelta(days=4)]
    assert window_partitions() == [today + dt.timedelta(days=n) for n in (-3, 0, 1, 2)]


def test_processed_batches_are_purged_after_retention(node, post, settings):
    # One window of a GPU not placed here: the purged batch has a rejection to take along.
    stranger = window("GPU-stranger", NOW.replace(second=0) - dt.timedelta(minutes=3))
    post(node, batch_document(node=node, windows=[stranger]))
    batches_process(worker="w")
    assert RejectedRecord.objects.count() == 1
    post(node, batch_document(node=node, windows=[]))  # still pending: never purged
    later = NOW + dt.timedelta(days=settings.TELEMETRY_BATCH_RETENTION_DAYS + 1)
    assert upkeep.batches_purge(now=later) == 1
    assert list(IngestBatch.objects.values_list("status", flat=True)) == ["pending"]
    # The purged batch's body went with it; the pending one keeps its body and queue row.
    (pending,) = IngestBatch.objects.all()
    assert list(BatchBody.objects.values_list("batch_id", flat=True)) == [pending.pk]
    assert list(QueuedBatch.objects.values_list("batch_id", flat=True)) == [pending.pk]
    assert not RejectedRecord.objects.exists()

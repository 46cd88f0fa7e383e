"""What a worker process caches between chunks — placements, window partitions — and why no
window is ever resolved or written against a stale copy.

Transactional: a chunk inside a caller's transaction caches nothing (what it reads could yet
be rolled back), so only committed chunks exercise the caches, as the worker runs them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from fleet.models import Gpu
from fleet.services.placement import gpu_move, gpu_unplace
from telemetry.models import IngestBatch, RejectedRecord, TelemetryWindow
from telemetry.services.partitions import partition_name
from telemetry.services.processing import batches_process
from telemetry.services.processing.validation import _PlacementCache
from telemetry.testing import fleet_node, window
from tests.telemetry.test_derived import T0, at, send

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_queued_passes"),  # the session's real worker must not take them
]


def stored() -> list[tuple[object, dt.datetime, object]]:
    return sorted(
        TelemetryWindow.objects.values_list("gpu_id", "window_start", "node_id"),
        key=lambda row: row[1],
    )


def rejected() -> list[tuple[str, dt.datetime | None]]:
    return sorted(RejectedRecord.objects.values_list("reason", "at"), key=lambda row: str(row))


def test_a_gpu_moved_after_its_placements_were_cached_is_found_where_it_now_is(post):
    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    b = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    send(post, a, [window(g.nvml_uuid, at(0))])
    assert batches_process(worker="w").windows == 1
    assert str(a.id) in _PlacementCache.nodes  # cached: the next chunk would not read it again
    gpu_move(gpu=g, node=b.node, slot=1, at=at(5), by=None, reason="moved")
    send(post, a, [window(g.nvml_uuid, at(6))])  # no longer in node a
    send(post, b, [window(g.nvml_uuid, at(7))])
    result = batches_process(worker="w")
    assert (result.processed, result.windows, result.rejected) == (2, 1, 1)
    assert stored() == [(g.id, at(0), a.id), (g.id, at(7), b.id)]
    assert rejected() == [("not_placed", at(6))]


def test_a_gpu_taken_out_between_two_chunks_is_refused_after_and_kept_before(post):
    """Both sides of a placement's end, in the chunk whose span crosses it and in one that
    does not, from the cache."""
    a = fleet_node(gpus=2, placed_from=T0 - dt.timedelta(days=3))
    g, other = a.gpus
    send(post, a, [window(other.nvml_uuid, at(0))])
    batches_process(worker="w")  # a's placements cached
    gpu_unplace(gpu=g, at=at(5), by=None, reason="RMA")
    send(post, a, [window(g.nvml_uuid, at(3)), window(g.nvml_uuid, at(7))])  # crosses at(5)
    assert batches_process(worker="w").windows == 1
    send(post, a, [window(g.nvml_uuid, at(4))])  # before the end, alone
    send(post, a, [window(other.nvml_uuid, at(8)), window(g.nvml_uuid, at(8))])  # after it
    assert batches_process(worker="w").windows == 2
    assert [(gpu, start) for gpu, start, _ in stored()] == [
        (other.id, at(0)), (g.id, at(3)), (g.id, at(4)), (other.id, at(8))
    ]  # fmt: skip
    assert rejected() == [("not_placed", at(7)), ("not_placed", at(8))]


def test_a_gpu_whose_nvml_uuid_changed_is_not_found_by_the_old_one(post):
    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    old = g.nvml_uuid
    send(post, a, [window(old, at(0))])
    batches_process(worker="w")
    Gpu.objects.filter(pk=g.pk).update(nvml_uuid="GPU-00000000-0000-0000-0000-000000000001")
    send(post, a, [window(old, at(1)), window("GPU-00000000-0000-0000-0000-000000000001", at(2))])
    assert batches_process(worker="w").windows == 1
    assert [start for _, start, _ in stored()] == [at(0), at(2)]
    assert rejected() == [("not_placed", at(1))]


def test_placements_read_in_a_transaction_that_rolled_back_are_never_used_again(post):
    """A chunk inside a caller's transaction sees that transaction's placement change; after
    the rollback, another change brings the change log back to as many rows as it had then:
    the GPU must still be found where it is."""
    from django.db import transaction

    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    send(post, a, [window(g.nvml_uuid, at(0))])
    batches_process(worker="w")
    send(post, a, [window(g.nvml_uuid, at(6))])
    with transaction.atomic():
        gpu_unplace(gpu=g, at=at(5), by=None, reason="RMA")
        assert batches_process(worker="w").rejected == 1  # not placed, as of that transaction
        transaction.set_rollback(True)
    fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))  # one change, as rolled back
    assert batches_process(worker="w").windows == 1
    assert [start for _, start, _ in stored()] == [at(0), at(6)]
    assert rejected() == []


def test_a_placement_change_committed_after_later_ones_is_not_missed(post, settings):
    """The change log's ids are taken when a change is written, not when it commits: a move
    written first and committed last, after the placements were cached with a later change
    in view, must still empty the cache."""
    import psycopg

    from tests.conftest import database_url

    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    with psycopg.connect(database_url(settings.DATABASES["default"])) as slow:
        slow.execute("UPDATE fleet_placement SET valid_to = %s WHERE gpu_id = %s", [at(5), g.id])
        fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))  # a later change, committed
        send(post, a, [window(g.nvml_uuid, at(6))])
        assert batches_process(worker="w").windows == 1  # placed, as far as it can see
        slow.commit()
    send(post, a, [window(g.nvml_uuid, at(7))])
    result = batches_process(worker="w")
    assert (result.windows, result.rejected) == (0, 1)
    assert rejected() == [("not_placed", at(7))]


def test_a_window_partition_dropped_after_it_was_cached_is_made_again(post):
    """The chunk that meets the missing partition fails once; its batches, retried one by
    one, find it made again: nothing is set aside."""
    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    send(post, a, [window(g.nvml_uuid, at(0))])
    batches_process(worker="w")
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{partition_name(T0.date())}"')
    send(post, a, [window(g.nvml_uuid, at(1))])
    result = batches_process(worker="w")
    assert (result.processed, result.failed, result.windows) == (1, 0, 1)
    assert [start for _, start, _ in stored()] == [at(1)]
    assert set(IngestBatch.objects.values_list("status", flat=True)) == {"processed"}


def test_pruning_the_change_log_never_hides_a_change_from_a_cache(post):
    """Beat prunes the placement change log (``placement_changes_prune``): a worker that
    cached placements, then sat idle past the horizon while a GPU moved, still sees the move
    — the newest row is kept — and one whose placements did not change only reads them
    again."""
    from telemetry.services.upkeep import placement_changes_prune

    def log() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM telemetry_placementchange ORDER BY id")
            return [row[0] for row in cursor.fetchall()]

    a = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    b = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))
    g = a.gpus[0]
    send(post, a, [window(g.nvml_uuid, at(0))])
    assert batches_process(worker="w").windows == 1
    assert str(a.id) in _PlacementCache.nodes
    gpu_move(gpu=g, node=b.node, slot=1, at=at(5), by=None, reason="moved")
    newest = log()[-1]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)  # every change is old by then
    assert placement_changes_prune(now=later) > 0
    assert log() == [newest]
    send(post, a, [window(g.nvml_uuid, at(6))])  # no longer in node a
    send(post, b, [window(g.nvml_uuid, at(7))])
    result = batches_process(worker="w")
    assert (result.processed, result.windows, result.rejected) == (2, 1, 1)
    assert rejected() == [("not_placed", at(6))]
    # Nothing changed since: pruning again deletes nothing (the newest stays) and windows
    # still find their GPU.
    assert placement_changes_prune(now=later) == 0
    send(post, b, [window(g.nvml_uuid, at(8))])
    assert batches_process(worker="w").windows == 1
    assert stored() == [(g.id, at(0), a.id), (g.id, at(7), b.id), (g.id, at(8), b.id)]

"""Marks a worker process remembers writing (``telemetry.services.processing.marks``): written
once while no pass can have claimed them, written again after a pass, a truncate or a delete,
and never trusted by a chunk a pass has not waited for (the races in
telemetry/services/derived.py)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, connections

from telemetry.models import HourlyRollup
from telemetry.services.derived import derived_drain, derived_process
from telemetry.services.processing import batches_process
from telemetry.services.processing.marks import marks_unwritten
from telemetry.testing import window
from tests.telemetry.test_derived import T0, at, send

pytestmark = [
    pytest.mark.usefixtures("now", "no_queued_passes"),
    pytest.mark.django_db(transaction=True),
]


def _marks() -> list[tuple[object, object, object, str]]:
    """Each mark: GPU, hour, earliest instant, and its row version's ``xmax`` — which moves
    when a transaction writes the mark or locks it (an upsert that met it), and only then."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT gpu_id, hour, lo, xmax::text FROM telemetry_derivedwork ORDER BY lo")
        return list(cursor.fetchall())


@pytest.fixture
def gpu(post):
    from telemetry.testing import fleet_node

    node = fleet_node(gpus=1, placed_from=T0 - dt.timedelta(days=3))

    def deliver(minute: int) -> None:
        send(post, node, [window(node.gpus[0].nvml_uuid, at(minute))])
        batches_process(worker="w")

    deliver.id = node.gpus[0].id  # type: ignore[attr-defined]
    return deliver


def test_a_mark_is_written_once_until_a_pass_takes_it(gpu):
    gpu(5)
    first = _marks()
    assert [m[:3] for m in first] == [(gpu.id, T0, at(5))]
    gpu(6)  # the same hour, later: remembered, not written (the row is not even locked)
    assert _marks() == first
    gpu(2)  # earlier than the mark reaches: written, reaching back
    again = _marks()
    assert [m[:3] for m in again] == [(gpu.id, T0, at(2))]
    assert again[0][3] != first[0][3]
    gpu(3)
    assert _marks() == again
    gpu(70)  # another hour
    assert [m[1] for m in _marks()] == [T0, T0 + dt.timedelta(hours=1)]
    derived_drain(limit=100)
    assert _marks() == []
    gpu(7)  # a pass took the mark: written again
    assert [m[:3] for m in _marks()] == [(gpu.id, T0, at(7))]
    derived_drain(limit=100)
    assert HourlyRollup.objects.get(gpu_id=gpu.id, hour=T0).windows == 5


@pytest.mark.parametrize(
    "removal", ["TRUNCATE telemetry_derivedwork", "DELETE FROM telemetry_derivedwork"]
)
def test_marks_removed_by_other_means_are_written_again(gpu, removal):
    gpu(5)
    with connection.cursor() as cursor:
        cursor.execute(removal)
    gpu(6)
    assert [m[:3] for m in _marks()] == [(gpu.id, T0, at(6))]


def test_a_pass_waits_for_a_chunk_that_relies_on_a_remembered_mark(gpu, monkeypatch):
    """The chunk has read the pass number and found its GPU-hour's mark remembered; a pass
    that would claim that mark now would compute the hour without the chunk's window. It
    waits for the chunk's commit, then claims, and its rollup has both windows."""
    gpu(0)
    reached, go_on = threading.Event(), threading.Event()
    unwritten = marks_unwritten

    def paused(*args, **kwargs):
        marks = unwritten(*args, **kwargs)
        reached.set()
        go_on.wait(30)
        return marks

    monkeypatch.setattr("telemetry.services.processing.marks_unwritten", paused)
    chunk = threading.Thread(target=_in_thread(lambda: gpu(1)))
    chunk.start()
    assert reached.wait(30)
    results = []
    passing = threading.Thread(
        target=_in_thread(lambda: results.append(derived_process(limit=100)))
    )
    passing.start()
    passing.join(timeout=1.5)
    assert passing.is_alive(), "the pass should wait for the chunk that skipped its mark"
    go_on.set()
    chunk.join(timeout=30)
    passing.join(timeout=30)
    assert not chunk.is_alive() and not passing.is_alive()
    assert results[0].claimed == 1
    assert HourlyRollup.objects.get(gpu_id=gpu.id, hour=T0).windows == 2
    assert _marks() == []


def _in_thread(work):
    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()

    return run

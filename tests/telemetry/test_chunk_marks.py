"""Derived-work marks written by the window path's last statement (``_CHUNK_DONE``): one per
(GPU, hour), reaching back to the earliest instant any chunk touched; kept by a pass that
fails; never written by a chunk that fails (the race rules in telemetry/services/derived.py;
the races themselves are staged in test_derived.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from telemetry.models import HourlyRollup, IngestBatch, TelemetryWindow
from telemetry.services import derived
from telemetry.services import processing as processing_module
from telemetry.services.derived import derived_drain, derived_mark, derived_process, instant_marks
from telemetry.services.processing import batches_process
from telemetry.testing import window
from tests.telemetry.test_derived import HOUR, T0, at, marks, send

pytestmark = pytest.mark.usefixtures("now")


def _marks_with_lo() -> list[tuple[object, object, object]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT gpu_id, hour, lo FROM telemetry_derivedwork ORDER BY lo")
        return list(cursor.fetchall())


def test_chunks_mark_each_hour_once_from_the_earliest_instant_touched(node, post):
    g0, g1 = node.gpus
    for minute in (3, 1, 2):  # three chunks, the second one late: lo goes back to :01
        send(post, node, [window(g0.nvml_uuid, at(minute))])
        batches_process(worker="w")
    send(post, node, [window(g1.nvml_uuid, at(70))])
    batches_process(worker="w")
    assert _marks_with_lo() == [(g0.id, T0, at(1)), (g1.id, T0 + HOUR, at(70))]
    assert derived_process(limit=1).claimed == 1
    assert len(marks()) == 1
    derived_drain(limit=1)
    assert marks() == []
    rollups = {(r.gpu_id, r.hour): r.windows for r in HourlyRollup.objects.all()}
    assert rollups == {(g0.id, T0): 3, (g1.id, T0 + HOUR): 1}


def test_a_pass_that_fails_keeps_every_mark_it_took(node, post, monkeypatch):
    g0 = node.gpus[0]
    for minute in (0, 1):
        send(post, node, [window(g0.nvml_uuid, at(minute))])
        batches_process(worker="w")

    def broken(**kwargs):
        raise RuntimeError("the pass fails after taking its marks")

    monkeypatch.setattr(derived, "incidents_from_events", broken)
    with pytest.raises(RuntimeError):
        derived_process(limit=100)
    assert marks() == [(g0.id, T0)]
    assert HourlyRollup.objects.count() == 0
    monkeypatch.undo()
    assert derived_process(limit=100).claimed == 1
    assert marks() == []
    assert HourlyRollup.objects.get().windows == 2


def test_a_chunk_that_fails_after_its_copy_leaves_neither_windows_nor_marks(
    node, post, monkeypatch
):
    """The chunk's last statement (batches, node status, marks, claim) fails after its
    windows were copied: all of it is rolled back together, and the batch, retried alone,
    fails the same way and is set aside; nothing it carried is half written."""
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(0))])
    monkeypatch.setattr(
        processing_module, "marks_document", lambda marks: '[["not an instant", []]]'
    )
    result = batches_process(worker="w")
    assert (result.processed, result.failed, result.windows) == (0, 1, 0)
    assert TelemetryWindow.objects.count() == 0
    assert marks() == []
    batch = IngestBatch.objects.get()
    assert (batch.status, batch.accepted_windows) == ("failed", 0)
    assert "not an instant" in batch.error


def test_a_mark_recorded_again_reaches_back_to_the_earliest_instant(node, post):
    """``derived_mark`` of other callers (XID events, say) may repeat a mark a chunk wrote."""
    g0 = node.gpus[0]
    send(post, node, [window(g0.nvml_uuid, at(5))])
    batches_process(worker="w")
    with connection.cursor() as cursor:
        derived_mark(cursor=cursor, marks=instant_marks([(g0.id, at(7)), (g0.id, at(2))]))
    assert _marks_with_lo() == [(g0.id, T0, at(2))]
    assert derived_process(limit=100).claimed == 1
    assert marks() == []
    assert HourlyRollup.objects.get(gpu_id=g0.id, hour=T0).windows == 1

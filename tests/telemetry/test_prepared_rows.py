"""COPY-ready rows made at the endpoint (``telemetry.services.processing.prepared``): what is
stored, and that the worker's checks over them decide and write exactly what its checks over
the decoded bodies do, byte for byte."""

from __future__ import annotations

import datetime as dt

import msgspec
import psycopg
import pytest
from django.db import connection
from psycopg import adapters
from psycopg._copy_base import format_row_binary
from psycopg.adapt import Transformer
from psycopg.pq import Format

from fleet.models import Placement
from telemetry.models import BatchBody, IngestBatch
from telemetry.services.processing import WINDOW_COLUMNS, WINDOW_WIRE_TYPES
from telemetry.services.processing.prepared import (
    COPY_SIGNATURE,
    COPY_TRAILER,
    LAYOUT,
    PREPARED_COLUMNS,
    micros,
    rows_decode,
    rows_encode,
)
from telemetry.services.processing.validation import (
    _decode,
    _placements,
    _retention_floor,
    _validate,
    _validate_prepared,
)
from telemetry.testing import event, minute, window
from tests.telemetry.conftest import NOW
from tests.telemetry.test_derived import send_v2
from tests.telemetry.test_processing import at, send

pytestmark = pytest.mark.usefixtures("now")


def v2(gpu_uuid: str, start: dt.datetime, observed: tuple[int, int] = (0, 60), **kw):
    """A schema-2 window: its observed span and how its utilization was measured."""
    return window(gpu_uuid, start, observed_from=observed[0], observed_to=observed[1],
                  util_method="buffer", **kw)  # fmt: skip


def test_the_endpoint_stores_the_windows_as_copy_ready_rows_beside_the_body(node, post):
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    send_v2(post, node, [
        v2(g0, at(0)), v2(g1, at(0)), v2(g0, at(1), (0, 30)),
        v2(g1, at(1), samples_ok=13),  # more samples than expected: not fine
    ])  # fmt: skip
    stored = BatchBody.objects.get()
    rows = rows_decode(stored.rows)
    assert rows is not None
    assert rows.layout == LAYOUT
    assert rows.gpus == [g0, g1]
    assert [w[:4] for w in rows.windows] == [
        (0, micros(at(0)), micros(at(1)), True),
        (1, micros(at(0)), micros(at(1)), True),
        (0, micros(at(1)), micros(at(1)) + 30_000_000, True),
        (1, micros(at(1)), micros(at(2)), False),
    ]
    assert (rows.events, rows.agent_version, rows.driver_version) == (
        False, "0.1.0-test", "570.86.15"
    )  # fmt: skip
    # Rows of another layout are not used: the worker makes them again from the body.
    other = msgspec.structs.replace(rows, layout=LAYOUT + 1)
    assert rows_decode(rows_encode(other)) is None
    assert rows_decode(b"\x93not rows") is None
    assert rows_decode(None) is None


def _copy_data(rows: list[tuple[object, ...]]) -> bytes:
    """What ``_validate``'s rows (``WINDOW_COLUMNS`` order) are as the prepared COPY's data."""
    order = [WINDOW_COLUMNS.index(c) for c in PREPARED_COLUMNS]
    tx = Transformer()
    tx.set_dumper_types([adapters.types[WINDOW_WIRE_TYPES[i]].oid for i in order], Format.BINARY)
    data = bytearray(COPY_SIGNATURE)
    for row in rows:
        format_row_binary([row[i] for i in order], tx, data)
    return bytes(data + COPY_TRAILER)


def test_the_checks_over_prepared_rows_decide_and_write_what_the_checks_over_bodies_do(
    node, post, settings
):
    """A chunk of every case a window can be: plain, of a GPU moved off the node inside the
    chunk, of no placed GPU, beyond the clock, beyond retention, impossible, close to a rule
    but within it; with events known and unknown. Both paths give the same rejections (in the
    same order, with the same payloads), marks, counts, events and telemetry ends, and the
    prepared path's COPY data is byte for byte the decoded path's rows."""
    settings.TELEMETRY_RAW_RETENTION_DAYS = 10  # the node's GPUs are placed since 30 days
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    # g1 leaves the node at minute 2: its later windows are not placed.
    Placement.objects.filter(gpu=node.gpus[1]).update(valid_to=at(2))
    send(post, node, [window(g0, at(m)) for m in range(3)] + [window(g1, at(0))])
    send_v2(post, node, [
        v2(g1, at(1)),
        v2(g1, at(3)),  # not placed any more
        v2("GPU-nowhere", at(1)),  # never placed
        v2(g0, minute(NOW) + dt.timedelta(minutes=10)),  # beyond the clock
        v2(g0, minute(NOW) - dt.timedelta(days=20)),  # placed, beyond retention
        v2(g0, at(3), samples_ok=13),  # impossible
        v2(g0, at(4), util_gpu={"min": 50.0000001, "avg": 50.0, "max": 60.0}),  # within
        v2(g0, at(62), (10, 40)),
        v2(g0, at(6), state="down", state_reason="XID 79"),  # no reason of the contract's form
        v2(g0, at(7), state="down", state_reason="xid:79"),  # fine, judged from the body
    ], [event("xid", at(3), gpu_uuid=g0, xid=79), event("gpu_exploded", at(3)),
        event("gpu_lost", at(3), gpu_uuid=g0, xid=79)])  # fmt: skip
    send(post, node, [window(g0, at(5), state="down", util_gpu=None, util_mem=None)])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT b.id, b.node_id, r.body, b.received_at, b.signed_at, b.window_count, 0,"
            " b.received_at, r.rows FROM telemetry_ingestbatch b"
            " JOIN telemetry_batchbody r ON r.batch_id = b.id ORDER BY b.id"
        )
        claimed = [(*row[:2], bytes(row[2]), *row[3:8], bytes(row[8])) for row in cursor]
        bodies, broken = _decode(claimed)
        prepared, _ = _decode(claimed)
        assert not broken
        assert all(item.decoded is None for item in prepared)  # nothing decoded yet
        starts = {w.window_start for item in bodies for w in item.batch.windows}
        placed = _placements(psycopg.Cursor(connection.connection), bodies, starts)
    floor = _retention_floor(NOW)
    rows: list[tuple[object, ...]] = []
    by_bodies = _validate(bodies, placed, now=NOW, floor=floor, emit=rows.append)
    data = bytearray()
    by_rows = _validate_prepared(prepared, placed, now=NOW, floor=floor, write=data.extend)

    assert bytes(data) == _copy_data(rows)
    assert len(rows) == 9
    assert by_rows.marks == by_bodies.marks
    assert by_rows.rejections == by_bodies.rejections
    assert [r[6] for r in by_rows.rejections] == [
        "not_placed", "not_placed", "future", "beyond_retention", "impossible_value",
        "impossible_value", "unknown_kind", "impossible_value",
    ]  # fmt: skip
    assert "xid 79 on a gpu_lost event" in by_rows.rejections[-1][7]
    assert by_rows.event_rows == by_bodies.event_rows
    assert len(by_rows.event_rows) == 1
    assert by_rows.gpu_ids == by_bodies.gpu_ids
    counts = [
        (i.accepted_windows, i.accepted_events, i.rejected, i.last_window_end) for i in bodies
    ]
    assert [
        (i.accepted_windows, i.accepted_events, i.rejected, i.last_window_end) for i in prepared
    ] == counts
    assert counts[1][3] == at(62) + dt.timedelta(seconds=40)
    # Only the batches with something refused or with events were decoded.
    assert [item.decoded is not None for item in prepared] == [False, True, False]
    assert IngestBatch.objects.count() == 3


def test_batches_without_rows_or_with_rows_of_another_layout_are_prepared_by_the_worker(node, post):
    """A batch stored before the endpoint prepared rows, and one whose rows were made for
    another window table or other rules, are stored as the others: their rows are made again
    from their bodies, and every stored column equals a plain COPY of the decoded windows."""
    from telemetry.schema import batch_decode_gzip
    from telemetry.services.processing import WINDOW_TYPES, _window_row, batches_process

    g0, g1 = (g.nvml_uuid for g in node.gpus)
    for m in range(3):
        send(post, node, [window(g0, at(m)), window(g1, at(m), state="down", util_gpu=None)])
    first, second, third = BatchBody.objects.order_by("batch_id")
    BatchBody.objects.filter(pk=first.pk).update(rows=None)
    rows = rows_decode(second.rows)
    assert rows is not None
    other = msgspec.structs.replace(rows, layout=LAYOUT + 1)
    BatchBody.objects.filter(pk=second.pk).update(rows=rows_encode(other))
    assert batches_process(worker="test-worker").windows == 6
    columns = ", ".join(WINDOW_COLUMNS)
    ids = {g.nvml_uuid: g.id for g in node.gpus}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM telemetry_window ORDER BY gpu_id, window_start")  # noqa: S608
        stored = cursor.fetchall()
        cursor.execute("CREATE TEMP TABLE plain_copy (LIKE telemetry_window)")
        with cursor.cursor.copy(f"COPY plain_copy ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(WINDOW_TYPES)
            for body in (first, second, third):
                for w in batch_decode_gzip(bytes(body.body), limit=1 << 20).windows:
                    copy.write_row(_window_row(w, ids[w.gpu_uuid], node.id, body.batch_id))
        cursor.execute(f"SELECT {columns} FROM plain_copy ORDER BY gpu_id, window_start")  # noqa: S608
        plain = cursor.fetchall()
        cursor.execute("DROP TABLE plain_copy")
    assert stored == plain
    assert len(stored) == 6

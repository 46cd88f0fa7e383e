"""A batch's windows as COPY-ready rows, made once where the body is first decoded.

The endpoint decodes and checks every body before it stores it; it also turns each window into
the bytes the worker's binary COPY sends for it, and stores them beside the raw body
(``BatchBody.rows``). The worker then copies bytes: per window it resolves the GPU, checks the
window's instant against its own clock and retention, and writes four pieces — the field
count, the GPU's id, the batch's id and the prepared bytes — without decoding the body or
building a row.

Per window the stored form keeps what the worker decides on: the GPU (an index into the
batch's NVML UUIDs), the start and the end of its observed span (µs since the Unix epoch, UTC),
whether no impossible-window rule can fail (``rules.window_fine``), and the COPY fields of
``window_start``, ``node_id`` and every column from ``samples_ok`` on (``PREPARED_COLUMNS``).
A window the worker refuses is explained from the body, decoded then (``_Loaded.batch``).

``LAYOUT`` says which columns, types, rules and row-building code (``copy._window_row``,
``rows_prepare``) the rows were made for; rows of another layout (or none: batches stored
before this form) are made again by the worker from the body, so a change to the window
table, the rules or how a row is built never copies stale bytes.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
import zlib
from typing import Any

import msgspec
from psycopg import adapters
from psycopg._copy_base import format_row_binary  # psycopg's own (C) binary COPY row writer
from psycopg.adapt import Transformer
from psycopg.pq import Format

from telemetry.schema import Batch
from telemetry.services.processing.copy import WINDOW_COLUMNS, WINDOW_WIRE_TYPES, _window_row
from telemetry.services.processing.rules import RULES_VERSION, window_fine

# The worker's COPY of prepared rows: the two ids the worker resolves first, then the
# prepared fields (``window_start``, ``node_id`` and the rest, in ``WINDOW_COLUMNS`` order).
PREPARED_COLUMNS = ("gpu_id", "batch_id", "window_start", "node_id", *WINDOW_COLUMNS[4:])
COPY_PREPARED = f"COPY telemetry_window ({', '.join(PREPARED_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_TAIL_TYPES = WINDOW_WIRE_TYPES[4:]  # samples_ok onward


# Binary COPY framing (PostgreSQL's "Binary Format"): the signature, flags and header
# extension length before the first row; a field count of -1 after the last.
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
COPY_TRAILER = b"\xff\xff"
# A row's field count and its GPU id's length, before the id's 16 bytes.
ROW_HEAD = len(PREPARED_COLUMNS).to_bytes(2, "big") + (16).to_bytes(4, "big")
_EIGHT = (8).to_bytes(4, "big")
_SIXTEEN = (16).to_bytes(4, "big")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01, PostgreSQL's, in µs since the Unix epoch
_US = dt.timedelta(microseconds=1)

# One window: GPU index, start (µs), end of its observed span (µs), no rule can fail, fields.
PreparedWindow = tuple[int, int, int, bool, bytes]


class PreparedRows(msgspec.Struct, array_like=True, frozen=True, gc=False):
    layout: int
    gpus: list[str]  # NVML UUIDs, in order of first appearance
    windows: list[PreparedWindow]
    events: bool  # the body has events (read from the body itself)
    agent_version: str
    driver_version: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(PreparedRows)
_local = threading.local()


def _transformer() -> Any:
    """A psycopg transformer that dumps the prepared columns in binary, one per thread (its
    class is psycopg's C one where installed: not a type mypy can name)."""
    tx = getattr(_local, "tx", None)
    if tx is None:
        tx = _local.tx = Transformer()
        tx.set_dumper_types([adapters.types[t].oid for t in _TAIL_TYPES], Format.BINARY)
    return tx


def micros(at: dt.datetime) -> int:
    """µs since the Unix epoch."""
    return (at - _EPOCH) // _US


def instant(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


def rows_prepare(batch: Batch, node_id: uuid.UUID) -> PreparedRows:
    """The batch's windows as the worker's COPY sends them (bar the GPU and batch ids)."""
    tx = _transformer()
    node_field = _SIXTEEN + node_id.bytes
    index: dict[str, int] = {}
    windows: list[PreparedWindow] = []
    for w in batch.windows:
        gpu = index.get(w.gpu_uuid)
        if gpu is None:
            gpu = index[w.gpu_uuid] = len(index)
        start = micros(w.window_start)
        fields = bytearray(_EIGHT)
        fields += (start - _PG_EPOCH_US).to_bytes(8, "big", signed=True)
        fields += node_field
        tail = bytearray()
        format_row_binary(_window_row(w, None, None, 0)[4:], tx, tail)
        fields += memoryview(tail)[2:]  # without its own field count
        windows.append(
            (gpu, start, start + w.observed_to * 1_000_000, window_fine(w), bytes(fields))
        )
    return PreparedRows(
        layout=LAYOUT,
        gpus=list(index),
        windows=windows,
        events=bool(batch.events),
        agent_version=batch.agent.version or "",
        driver_version=batch.agent.driver_version or "",
    )


def rows_encode(rows: PreparedRows) -> bytes:
    return _encoder.encode(rows)


def rows_stored(batch: Batch, node_id: uuid.UUID) -> bytes:
    """The batch's prepared rows as stored beside its body (``BatchBody.rows``)."""
    return rows_encode(rows_prepare(batch, node_id))


def rows_decode(blob: bytes | memoryview | None) -> PreparedRows | None:
    """The stored rows, or None when there are none or they are of another layout."""
    if blob is None:
        return None
    try:
        rows = _decoder.decode(blob)
    except msgspec.DecodeError:
        return None
    return rows if rows.layout == LAYOUT else None


def batch_field(batch_pk: int) -> bytes:
    """The COPY field of a batch's id (``batch_id``, int8)."""
    return _EIGHT + batch_pk.to_bytes(8, "big", signed=True)


def _code(code: Any) -> tuple[Any, ...]:
    """What compiled code does, for ``LAYOUT``: its bytecode, names and constants (nested code
    taken apart the same way), not its comments, line numbers or addresses."""
    consts = tuple(_code(c) if hasattr(c, "co_code") else c for c in code.co_consts)
    return (code.co_code, code.co_names, consts)


# Which columns, types, rules and row-building code rows are prepared for (module docstring).
LAYOUT = zlib.crc32(
    repr(
        (
            PREPARED_COLUMNS,
            _TAIL_TYPES,
            RULES_VERSION,
            _code(_window_row.__code__),
            _code(rows_prepare.__code__),
        )
    ).encode()
)

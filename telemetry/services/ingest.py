"""The ingest endpoint's one write: store the raw batch, idempotently, and queue the worker."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import connection, transaction

from core.instants import iso_z
from telemetry.dispatch import processing_kick
from telemetry.schema import Batch
from telemetry.services.processing.prepared import rows_stored


class Outcome(StrEnum):
    ACCEPTED = "accepted"  # 202: stored now
    REPLAYED = "replayed"  # 200: stored before, with the same body; the original answer
    IN_PROGRESS = "in_progress"  # 409: the same key is being stored by another request
    CONFLICT = "conflict"  # 422: the same key was stored with a different body


@dataclass(frozen=True)
class Receipt:
    outcome: Outcome
    answer: dict[str, Any]


def _key_lock_id(node_id: uuid.UUID, batch_id: uuid.UUID) -> int:
    digest = hashlib.sha256(f"telemetry-batch:{node_id}:{batch_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def batch_receive(
    *,
    node_id: uuid.UUID,
    batch_id: uuid.UUID,
    body: bytes,
    batch: Batch,
    body_sha256: str,
    signed_at: dt.datetime,
    received_at: dt.datetime,
) -> Receipt:
    """Commits the raw batch under ``(node, batch_id)``, or says why not; queues on commit.

    A transaction-scoped advisory lock on the key tells a concurrent duplicate (409, retry)
    from a replay of a committed batch (200, the original answer); the unique constraint is
    what finally guarantees one row per key. Lock and insert are one statement in autocommit:
    the batch is committed when it returns. ``batch`` is the body decoded and checked: the
    batch row keeps its schema version (1 or 2) and counts for operators, and its windows are
    stored beside the body as the worker's COPY sends them
    (``telemetry.services.processing.prepared``).
    """
    window_count, event_count = len(batch.windows), len(batch.events)
    answer = {
        "batch_id": str(batch_id),
        "status": "accepted",
        "received_at": iso_z(received_at),
        "windows": window_count,
        "events": event_count,
    }
    # One statement, so one round trip and (outside a caller's transaction) its own
    # transaction: the key's lock is taken first (the INSERT reads its result), held through
    # the INSERT and released by the statement's commit, before the 202.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH lock AS (SELECT pg_try_advisory_xact_lock(%s) AS locked),
            stored AS (
                INSERT INTO telemetry_ingestbatch
                    (node_id, batch_id, body_sha256, schema, status, received_at,
                     signed_at, window_count, event_count, attempts, answer, accepted_windows,
                     accepted_events, rejected_count, claimed_by, error)
                SELECT %s, %s, %s, %s, 'pending', %s, %s, %s, %s, 0, %s, 0, 0, 0, '', ''
                  FROM lock WHERE lock.locked
                ON CONFLICT (node_id, batch_id) DO NOTHING
                RETURNING id
            ),
            raw AS (
                INSERT INTO telemetry_batchbody (batch_id, body, rows)
                SELECT id, %s, %s FROM stored
            )
            SELECT lock.locked, EXISTS (SELECT FROM stored) FROM lock
            """,
            [
                _key_lock_id(node_id, batch_id),
                node_id,
                batch_id,
                body_sha256,
                batch.SCHEMA,
                received_at,
                signed_at,
                window_count,
                event_count,
                json.dumps(answer),
                body,
                rows_stored(batch, node_id),
            ],
        )
        locked, inserted = cursor.fetchone() or (False, False)
        if not locked:
            return Receipt(Outcome.IN_PROGRESS, {})
        if inserted:
            transaction.on_commit(processing_kick)  # at once, unless in a caller's transaction
            return Receipt(Outcome.ACCEPTED, answer)
        cursor.execute(
            "SELECT body_sha256, answer FROM telemetry_ingestbatch "
            "WHERE node_id = %s AND batch_id = %s",
            [node_id, batch_id],
        )
        stored_sha256, stored_answer = cursor.fetchone() or ("", {})
    if stored_sha256 != body_sha256:
        return Receipt(Outcome.CONFLICT, {})
    if isinstance(stored_answer, str):
        stored_answer = json.loads(stored_answer)
    return Receipt(Outcome.REPLAYED, stored_answer)


def batches_requeue(*, batch_ids: list[int]) -> int:
    """Puts failed batches back in the queue (after an operator fixed the cause)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            WITH requeued AS (
                UPDATE telemetry_ingestbatch
                   SET status = 'pending', attempts = 0, error = '', claimed_by = '',
                       claimed_at = NULL
                 WHERE id = ANY(%s) AND status = 'failed'
             RETURNING id, received_at
            )
            INSERT INTO telemetry_queuedbatch (batch_id, received_at, attempts, failed)
            SELECT id, received_at, 0, false FROM requeued
                ON CONFLICT (batch_id) DO UPDATE SET attempts = 0, failed = false
            """,
            [batch_ids],
        )
        count = int(cursor.rowcount)
        transaction.on_commit(processing_kick)
    return count

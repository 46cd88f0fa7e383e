"""Writing events: the transactional outbox other apps call from inside their changes.

An event row is written in the caller's transaction, so it commits with the change or not at
all; once committed, a dispatch pass is queued (``transaction.on_commit``). If Redis loses that
task, beat's sweep finds events not yet dispatched in PostgreSQL and queues it again.
Emitting is idempotent on ``dedupe_key``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from webhooks.models import EventType, WebhookEvent


@dataclass(frozen=True)
class Event:
    """An event to emit: ``data`` for every recipient, ``owner_data`` only for a partner
    granted that owner."""

    type: EventType
    owner_ids: Sequence[uuid.UUID]
    data: dict[str, Any]
    owner_data: dict[str, dict[str, Any]] = field(default_factory=dict)
    dedupe_key: str = ""


def _jsonable(value: Any) -> Any:
    """Dates, decimals and UUIDs as the API writes them (ISO 8601, strings)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def events_emit(*, events: Iterable[Event]) -> int:
    """Writes the events (one INSERT) in the current transaction, skipping any whose
    ``dedupe_key`` is already there; returns how many were given with owners."""
    now = timezone.now()
    rows = []
    for event in events:
        if not event.owner_ids:
            continue  # nobody to tell
        event_id = uuid.uuid4()
        rows.append(
            WebhookEvent(
                id=event_id,
                type=event.type,
                owner_ids=sorted(set(event.owner_ids), key=str),
                data=_jsonable(event.data),
                owner_data=_jsonable(event.owner_data),
                dedupe_key=event.dedupe_key or f"{event.type}:{event_id}",
                created_at=now,
            )
        )
    if not rows:
        return 0
    WebhookEvent.objects.bulk_create(rows, ignore_conflicts=True)
    dispatch_on_commit()
    return len(rows)


# The SELECT yields (type, owner_ids uuid[], data jsonb, owner_data jsonb, dedupe_key text).
_FROM_SELECT = """
INSERT INTO webhooks_webhookevent
    (id, type, owner_ids, data, owner_data, dedupe_key, created_at)
SELECT gen_random_uuid(), e.type, e.owner_ids, e.data, e.owner_data, e.dedupe_key, %(now)s
  FROM ({select}) AS e(type, owner_ids, data, owner_data, dedupe_key)
 WHERE cardinality(e.owner_ids) > 0
ON CONFLICT (dedupe_key) DO NOTHING
"""


def events_emit_select(*, cursor: Any, select: str, params: dict[str, Any]) -> int:
    """Writes one event per row of ``select`` with one INSERT … SELECT, in the caller's
    transaction (bulk writers: the telemetry worker). Returns how many were new."""
    cursor.execute(_FROM_SELECT.format(select=select), {**params, "now": timezone.now()})
    inserted = int(cursor.rowcount)
    if inserted:
        dispatch_on_commit()
    return inserted


def dispatch_on_commit() -> None:
    from webhooks.dispatch import dispatch_kick

    if connection.in_atomic_block:
        transaction.on_commit(dispatch_kick)
    else:
        dispatch_kick()

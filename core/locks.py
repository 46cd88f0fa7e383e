"""The one order in which Steward takes row locks, and the one helper that takes them.

Two transactions that lock rows of two kinds in opposite orders can wait for each other for
ever; PostgreSQL then aborts one of them (a deadlock), and an operator's change fails for no
reason of its own. So every service locks rows through ``lock``, which takes a kind's rows in
primary-key order, and kinds in the order of ``LOCK_ORDER``: a transaction that holds a lock
of one kind never asks for a kind that comes earlier. ``lock`` checks that as it goes and
raises ``LockOrderError`` (a programming error, which the tests would meet first) instead of
taking a lock out of order. Rows the transaction already holds, as strongly, may be locked
again at any point: that waits for no one (a close's chunks, run inside an operator action's
one transaction, each hold the period they already hold).

Not covered, because they cannot wait in a cycle with these: ``FOR UPDATE SKIP LOCKED``
claims (the ingest worker's batches, the derived pass's marks) never wait, and the advisory
locks (one GPU import at a time, one derived pass at a time, an ingest key) are each the only
lock of their transaction's kind. docs/architecture.md repeats the order.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.expressions import RawSQL

# Kinds as ``app_label.model``, in the order a transaction may lock them. Money inputs lock
# the periods they reach first (so a close waits for them), then the owner, the cluster, the
# GPUs; statements come after the cards they are computed from; fleet's events, accounts'
# disclosures and grants and telemetry's enrolment rows are never locked before any of those.
LOCK_ORDER: tuple[str, ...] = (
    "billing.period",
    "accounts.owner",
    "fleet.site",
    "fleet.cluster",
    "fleet.node",
    "fleet.gpumodel",
    "fleet.gpu",
    "billing.ratecard",
    "billing.poolsplit",
    "billing.statement",
    "fleet.maintenancewindow",
    "fleet.incidentdraft",
    "fleet.incident",
    "accounts.disclosure",
    "accounts.partnergrant",
    "webhooks.webhookendpoint",
    "webhooks.webhookdelivery",
    "telemetry.bootstraptoken",
    "telemetry.nodecredential",
    "telemetry.ingestclaim",
)
_RANK = {label: rank for rank, label in enumerate(LOCK_ORDER)}

# Which transaction (PostgreSQL's id for it) last took a lock on this connection, and the
# latest kind it locked. A new transaction starts from nothing.
_TAKEN = "steward_locks_taken"
# The rows that transaction holds: (kind, primary key) → strength (FOR SHARE 1, FOR UPDATE 2).
_HELD = "steward_locks_held"
SHARE, UPDATE = 1, 2


class LockOrderError(RuntimeError):
    """A service asked for a lock out of ``LOCK_ORDER``: a bug to fix in that service."""


def lock[M: Model](queryset: QuerySet[M], *, of: tuple[str, ...] = ("self",)) -> list[M]:
    """Locks the rows of ``queryset`` (``SELECT … FOR UPDATE OF`` ``of``) in primary-key order
    and returns them, in that order. Inside a transaction only (as ``select_for_update``)."""
    label, rank = _placed(queryset)
    rows: list[Any] = list(
        queryset.select_for_update(of=of)
        .annotate(_lock_xact=RawSQL("pg_current_xact_id()::text", []))
        .order_by("pk")
    )
    if rows:
        _check(queryset.db, label, rank, rows[0]._lock_xact, [r.pk for r in rows], UPDATE)
    return rows


def lock_shared(queryset: QuerySet[Any], *fields: str) -> list[tuple[Any, ...]]:
    """Holds the rows of ``queryset`` ``FOR SHARE`` (others may share them, none may change
    them until this transaction ends), in primary-key order, in ``LOCK_ORDER`` as ``lock``;
    returns ``fields`` of each row. Django's ORM has no ``FOR SHARE``: the queryset's own SQL
    is used, with the clause added."""
    label, rank = _placed(queryset)
    rows = (
        queryset.order_by("pk")
        .annotate(_lock_xact=RawSQL("pg_current_xact_id()::text", []))
        .values_list(*fields, "pk", "_lock_xact")
    )
    sql, params = rows.query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"{sql} FOR SHARE", params)
        found = cursor.fetchall()
    if found:
        _check(queryset.db, label, rank, found[0][-1], [row[-2] for row in found], SHARE)
    return [row[:-2] for row in found]


def lock_one[M: Model](queryset: QuerySet[M], *, of: tuple[str, ...] = ("self",)) -> M:
    """The single row of ``queryset``, locked; ``DoesNotExist`` when there is none."""
    rows = lock(queryset, of=of)
    if not rows:
        missing: type[Exception] = queryset.model.DoesNotExist  # type: ignore[attr-defined]
        raise missing(f"No {queryset.model._meta.verbose_name} to lock.")
    return rows[0]


def _placed(queryset: QuerySet[Any]) -> tuple[str, int]:
    """The queryset's kind and its place in ``LOCK_ORDER``; a kind without one is refused."""
    label = queryset.model._meta.label_lower
    rank = _RANK.get(label)
    if rank is None:
        raise LockOrderError(f"{label} has no place in core.locks.LOCK_ORDER; give it one.")
    return label, rank


def _scope(connection: Any, xact: str) -> tuple[str, Any]:
    """The transaction a service's locks belong to: PostgreSQL's transaction, and within it the
    outermost ``atomic`` block that is not a test case's (a test runs in one transaction of
    its own, and the services it calls in turn are each a transaction of theirs in production;
    their savepoint stands for that)."""
    blocks = connection.atomic_blocks
    first = next((i for i, b in enumerate(blocks) if not b._from_testcase), 0)
    savepoint = connection.savepoint_ids[first - 1] if first else None
    return xact, savepoint or first


def _check(alias: str, label: str, rank: int, xact: str, keys: list[Any], strength: int) -> None:
    connection = connections[alias]
    scope = _scope(connection, xact)
    held: tuple[Any, dict[tuple[str, Any], int]] | None = getattr(connection, _HELD, None)
    if held is None or held[0] != scope:
        held = (scope, {})
        setattr(connection, _HELD, held)
    rows = held[1]
    if all(rows.get((label, key), 0) >= strength for key in keys):
        return  # held already, as strongly: taking them again waits for no one
    for key in keys:
        rows[label, key] = max(rows.get((label, key), 0), strength)
    taken: tuple[Any, int, str] | None = getattr(connection, _TAKEN, None)
    if taken is not None and taken[0] == scope and taken[1] > rank:
        raise LockOrderError(
            f"{label} locked after {taken[2]} in one transaction: core.locks.LOCK_ORDER takes "
            f"{label} first. Lock it before {taken[2]}, or change the order (and the docs)."
        )
    if taken is None or taken[0] != scope or taken[1] < rank:
        setattr(connection, _TAKEN, (scope, rank, label))

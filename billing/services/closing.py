"""Closing a period: open → closing (drafts computed, recomputable) → closed (all published).

``period_close_run`` is resumable and idempotent. It computes every statement first (no
writes), then writes them in small transactions, one per chunk of statements (outside a
transaction, on ``WRITERS`` connections at once); a statement whose stored hash already
equals the recomputed one is left alone (that hash is the run's watermark). A crash part-way
leaves some chunks written and the rest as they were, and running again finishes the job
with exactly the result of a clean run.

A whole run also freezes each cluster's pool split (``PoolSplit``), replaced by the run's
last transaction; ``owner_statements_recompute`` redrafts one owner's statements with it,
measuring only that owner's GPUs. Starting a close removes the splits of an earlier one.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts import selectors as accounts_selectors
from accounts.models import Disclosure, Owner, User
from billing.models import Period, PoolSplit, Statement, StatementLine
from billing.models.statements import LINE_FIELDS
from billing.selectors.pending import telemetry_pending
from billing.services.audit import billing_audit, values
from billing.services.computing import (
    Draft,
    SplitNeedsOwners,
    StatementKey,
    statements_compute,
)
from billing.services.periods import month_bounds, period_label, span_label
from core.locks import lock, lock_one, lock_shared
from telemetry.services.collector import collector_paused

WRITE_CHUNK = 50  # statements per transaction
# How many times a redraft may widen to the co-holders of GPUs that changed hands.
REDRAFT_ROUNDS = 5
# Connections writing chunks at once (outside a transaction; inside one, the caller's alone).
WRITERS = 2


@dataclass(frozen=True)
class CloseRun:
    written: int
    unchanged: int
    removed: int
    skipped_published: int


def refuse_pending_telemetry(period: Period, doing: str) -> None:
    pending = telemetry_pending(start=period.start, end=period.end)
    if pending.any:
        raise ValidationError(
            {
                "period": f"Cannot {doing} {period}: telemetry that may hold data for it is "
                f"not processed yet ({pending.describe()}). Wait for the workers, or "
                "re-queue failed batches in the telemetry console, then try again."
            }
        )


def _disclosure() -> Disclosure:
    current = accounts_selectors.disclosure_current()
    if current is None:
        raise ValidationError(
            {"disclosure": "No risk disclosure is published; statements cannot be issued."}
        )
    return current


def _refuse_out_of_order(period: Period) -> None:
    """Balances carry forward in order (an opening balance is the latest published closing
    balance before it), so a period closes only when all time from the first period up to it
    is in closed periods, and before any later period starts closing: a month closed out of
    order, or never closed at all, would be left out of every balance after it."""
    earlier = Period.objects.filter(start__lt=period.start).only("start", "end", "status")
    covered: datetime | None = None
    for before in earlier.order_by("start"):
        if covered is not None and before.start > covered:
            _refuse_gap(start=covered, end=before.start)
        if before.status != Period.Status.CLOSED:
            raise ValidationError(
                {"period": f"Close {period_label(before)} first: balances carry forward in order."}
            )
        covered = before.end if covered is None else max(covered, before.end)
    if covered is not None and covered < period.start:
        _refuse_gap(start=covered, end=period.start)
    later = (
        Period.objects.filter(start__gt=period.start)
        .exclude(status=Period.Status.OPEN)
        .order_by("start")
        .first()
    )
    if later is not None:
        raise ValidationError(
            {
                "period": f"{period_label(later)} is already {later.get_status_display().lower()}: "
                f"periods close in order, as balances carry forward, so {period_label(period)} "
                "cannot be closed after it."
            }
        )


def _refuse_gap(*, start: datetime, end: datetime) -> None:
    """No period covers ``[start, end)``: name its first month (or the whole gap, when it
    is not made of calendar months) for the operator to create and close first."""
    at = start.astimezone(UTC)
    month = month_bounds(year=at.year, month=at.month)
    missing = month if month[0] == at and month[1] <= end else (start, end)
    label = span_label(start=missing[0], end=missing[1])
    raise ValidationError(
        {
            "period": f"Close {label} first: it has no period yet, and balances carry forward "
            f"in order. Create the period for {label}, close it and publish its statements."
        }
    )


def _require_open(period: Period) -> None:
    if period.status != Period.Status.OPEN:
        raise ValidationError({"period": f"Period {period} is {period.status}, not open."})


def _require_ended(period: Period) -> None:
    if period.end > timezone.now():
        raise ValidationError({"period": f"Period {period} has not ended yet."})


def close_start_checks(period: Period) -> list[tuple[str, Callable[[], object]]]:
    """What a close checks before it starts, in order, by name: each raises the error the
    close refuses with. ``period_close_start`` runs them all; the guided close page shows
    each one's state (``period_close_refusals``)."""
    return [
        ("open", lambda: _require_open(period)),
        ("ended", lambda: _require_ended(period)),
        ("order", lambda: _refuse_out_of_order(period)),
        ("telemetry", lambda: refuse_pending_telemetry(period, "close")),
        ("disclosure", _disclosure),
    ]


def period_close_refusals(*, period: Period) -> dict[str, str]:
    """Why ``period_close_start`` would refuse ``period`` now, by check (empty: it would
    start). Changes and locks nothing."""
    refusals = {}
    for name, check in close_start_checks(period):
        try:
            check()
        except ValidationError as error:
            refusals[name] = " ".join(error.messages)
    return refusals


@transaction.atomic
def period_close_start(*, period: Period, by: User, reason: str = "") -> Period:
    """open → closing. Refuses with unprocessed telemetry, an earlier month not closed (or
    without a period), a later period closing or closed, a period not ended yet, or no
    published disclosure; changes nothing then."""
    locked = lock_one(Period.objects.filter(pk=period.pk))
    for _, check in close_start_checks(locked):
        check()
    updated = Period.objects.filter(pk=locked.pk, status=Period.Status.OPEN).update(
        status=Period.Status.CLOSING, closing_started_at=timezone.now()
    )
    if updated != 1:  # the row is locked and was open: only a broken lock gets here
        raise ValidationError({"period": f"Period {locked} changed while it was locked."})
    # Splits of an earlier close (since reopened) were made from what may have changed.
    PoolSplit.objects.filter(period=locked).delete()
    locked.refresh_from_db()
    billing_audit(
        locked,
        action="billing.period.close_start",
        by=by,
        reason=reason,
        before={"status": Period.Status.OPEN.value},
        after=values(locked, "status", "closing_started_at"),
    )
    return locked


def period_close_run(*, period: Period, by: User | None = None, reason: str = "") -> CloseRun:
    """(Re)computes every draft of a closing period. Free to run again at any time. ``by``:
    the operator who runs it (None: Steward itself, e.g. resuming a run)."""
    period.refresh_from_db()
    if period.status != Period.Status.CLOSING:
        raise ValidationError(
            {"period": f"Period {period} is {period.status}; drafts are computed while closing."}
        )
    refuse_pending_telemetry(period, "compute statements for")
    with collector_paused():
        splits: list[PoolSplit] = []
        drafts = statements_compute(period=period, disclosure=_disclosure(), splits=splits)
        return statements_write(period=period, drafts=drafts, by=by, reason=reason, splits=splits)


def owner_statements_recompute(
    *, period: Period, owner: Owner, by: User | None = None, reason: str = ""
) -> CloseRun:
    """Recomputes one owner's drafts of a closing period — after a correction of the owner's
    holdings or account, or under a new disclosure, say — with each cluster's pool split as
    the period's last whole run froze it, so only the owner's GPUs are measured and the
    owner's figures agree with the other owners' drafts. Where one of the owner's GPUs (now
    or when the pool was split) changed hands since, every owner who held it then or holds it
    now is redrafted too. Refuses, changing nothing, while telemetry for the period is
    pending, where a split no longer holds for these GPUs (a pool, a GPU's weight, a GPU in
    or out of its cluster), and when a whole run replaced the splits meanwhile: then the
    whole period is recomputed instead."""
    period.refresh_from_db()
    if period.status != Period.Status.CLOSING:
        raise ValidationError(
            {"period": f"Period {period} is {period.status}; drafts are computed while closing."}
        )
    refuse_pending_telemetry(period, "compute statements for")
    owners = {str(owner.pk)}
    # The splits as they are now: if a whole run replaces them meanwhile, nothing is written.
    used = sorted(PoolSplit.objects.filter(period=period).values_list("pk", flat=True))
    with collector_paused():
        for _ in range(REDRAFT_ROUNDS):
            try:
                drafts = statements_compute(
                    period=period,
                    disclosure=_disclosure(),
                    owner_ids=sorted(owners),
                    reuse_split=True,
                )
                break
            except SplitNeedsOwners as more:  # co-holders of GPUs that changed hands
                owners |= more.owners
        else:
            raise ValidationError(
                {
                    "period": f"Redrafting {owner} reaches the drafts of {len(owners)} owners "
                    "and more; recompute the whole period instead."
                }
            )
        return statements_write(
            period=period,
            drafts=drafts,
            by=by,
            reason=reason,
            owner_ids=sorted(owners),
            splits_used=used,
        )


def period_close(*, period: Period, by: User, reason: str = "") -> CloseRun:
    """open → closing, then the drafts. When the drafts cannot be computed (bad input: a
    pool with nothing to split it by, revenue in a currency a co-owner is not billed in),
    the period goes back to open, so the operator can correct what the error names."""
    started = period_close_start(period=period, by=by, reason=reason)
    try:
        return period_close_run(period=started, by=by, reason=reason)
    except ValidationError as error:
        with transaction.atomic():
            reopened = not Statement.objects.filter(period=started).exists() and bool(
                Period.objects.filter(pk=started.pk, status=Period.Status.CLOSING).update(
                    status=Period.Status.OPEN, closing_started_at=None
                )
            )
            if reopened:
                billing_audit(
                    started,
                    action="billing.period.reopen",
                    by=by,
                    reason="The drafts could not be computed: " + " ".join(error.messages),
                    before={"status": Period.Status.CLOSING.value},
                    after={"status": Period.Status.OPEN.value},
                )
        raise


def statements_write(
    *,
    period: Period,
    drafts: dict[StatementKey, Draft],
    by: User | None = None,
    reason: str = "",
    splits: list[PoolSplit] | None = None,
    owner_ids: list[str] | None = None,
    splits_used: list[int] | None = None,
) -> CloseRun:
    """Writes the drafts (see the module's docstring). Its last transaction, which removes
    the drafts of owners who have none any more, also writes the run's audit entry
    (``billing.period.compute``, with its counts) and its ``splits``, replacing the period's.
    With ``owner_ids``, the drafts are these owners' alone: only their drafts are removed,
    and the entry is ``billing.owner.recompute``. ``splits_used``: the ids of the splits the
    drafts were computed with; each transaction refuses, writing nothing, unless they are still
    the period's (a whole run replaced them meanwhile: its drafts stand)."""
    if splits is not None:  # a crash part-way leaves none: nothing redrafts with a stale one
        PoolSplit.objects.filter(period=period).delete()
    keys = sorted(drafts)
    chunks = [keys[i : i + WRITE_CHUNK] for i in range(0, len(keys), WRITE_CHUNK)]
    if WRITERS > 1 and len(chunks) > 1 and not connection.in_atomic_block:
        counts = _write_chunks_in_parallel(period, drafts, chunks, splits_used)
    else:
        counts = [_write_chunk(period, drafts, chunk, splits_used) for chunk in chunks]
    written = sum(c[0] for c in counts)
    unchanged = sum(c[1] for c in counts)
    skipped = sum(c[2] for c in counts)
    removed = 0
    with transaction.atomic():
        _hold_closing(period, splits_used)
        mine = Q() if owner_ids is None else Q(owner_id__in=owner_ids)
        stale = lock(
            Statement.objects.filter(mine, period=period)
            .exclude(status=Statement.Status.PUBLISHED)
            .only("pk", "owner_id", "currency")
        )
        for statement in stale:
            if (str(statement.owner_id), statement.currency) not in drafts:
                statement.lines.all().delete()
                statement.delete()
                removed += 1
        run = CloseRun(written, unchanged, removed, skipped)
        if splits is not None:
            PoolSplit.objects.filter(period=period).delete()
            PoolSplit.objects.bulk_create(splits)
        if owner_ids is None:
            billing_audit(
                period, action="billing.period.compute", by=by, reason=reason, after=asdict(run)
            )
        else:
            billing_audit(
                period,
                action="billing.owner.recompute",
                by=by,
                reason=reason,
                after={"owner_ids": owner_ids, **asdict(run)},
            )
    return run


def _write_chunk(
    period: Period,
    drafts: dict[StatementKey, Draft],
    keys: list[StatementKey],
    splits_used: list[int] | None = None,
) -> tuple[int, int, int]:
    """One transaction: the chunk's statements and lines (written, unchanged, skipped)."""
    written = unchanged = skipped = 0
    with transaction.atomic():
        _hold_closing(period, splits_used)
        existing = {
            (str(s.owner_id), s.currency): s
            for s in lock(
                Statement.objects.defer("frozen_inputs").filter(  # large, and compared by hash
                    period=period, owner_id__in=[k[0] for k in keys]
                )
            )
        }
        created: list[tuple[Any, ...]] = []
        rewritten: list[Statement] = []
        lines: list[tuple[Any, ...]] = []
        now = timezone.now()
        for key in keys:
            statement = existing.get(key)
            if statement is not None and statement.status == Statement.Status.PUBLISHED:
                skipped += 1  # published: corrected by reconciliation, never rewritten
                continue
            if statement is not None and statement.content_sha256 == drafts[key].sha256:
                unchanged += 1
                continue
            if statement is None:
                statement_id = uuid.uuid4()
                created.append(_statement_row(statement_id, period, drafts[key], now))
            else:
                statement_id = statement.pk
                for name, value in _values(drafts[key], now).items():
                    setattr(statement, name, value)
                rewritten.append(statement)
            lines += line_rows(statement_id, drafts[key].content)
            written += 1
        if rewritten:
            StatementLine.objects.filter(statement__in=rewritten).delete()
            Statement.objects.bulk_update(rewritten, fields=list(_values_fields()))
        _copy(Statement._meta.db_table, _STATEMENT_COLUMNS, created)
        _copy(StatementLine._meta.db_table, _LINE_COLUMNS, lines)
    return written, unchanged, skipped


def _hold_closing(period: Period, splits_used: list[int] | None = None) -> None:
    """In a write transaction: the period must still be closing, and stays so until the
    transaction ends. A run checks the status once, then computes for a long while; meanwhile
    the close may have finished, and a draft written now would sit in a closed period. The
    row is held FOR SHARE, not FOR UPDATE: the run's writers do not wait on one another,
    while ``period_close_finish`` (FOR UPDATE) waits for them, then counts their drafts.
    ``splits_used``: a redraft's splits must still be the period's, and are held FOR SHARE
    too, so a whole run's replacing them waits until this transaction ends."""
    held = lock_shared(Period.objects.filter(pk=period.pk), "status")
    status = held[0][0] if held else "gone"
    if status != Period.Status.CLOSING:
        raise ValidationError(
            {
                "period": f"{period_label(period)} is {status} now, no longer closing; its "
                "drafts were not written."
            }
        )
    if splits_used is not None:
        current = [row[0] for row in lock_shared(PoolSplit.objects.filter(period=period), "pk")]
        if current != splits_used:
            raise ValidationError(
                {
                    "period": f"The drafts of {period_label(period)} were recomputed while "
                    "these were; the pool splits they were computed with are gone, so they "
                    "were not written. Recompute them again."
                }
            )


def _write_chunks_in_parallel(
    period: Period,
    drafts: dict[StatementKey, Draft],
    chunks: list[list[StatementKey]],
    splits_used: list[int] | None = None,
) -> list[tuple[int, int, int]]:
    """The chunks' transactions on ``WRITERS`` connections of their own, each thread taking
    the next chunk when done: the database parses the frozen inputs (most of a write) on
    more than one core. Chunks hold different statements, so the result is the sequential
    one; after a failure no further chunk starts, and the first error is raised (what was
    committed stays, as after a crash: a rerun finishes the job)."""
    pending = iter(chunks)
    lock = threading.Lock()
    counts: list[tuple[int, int, int]] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            while True:
                with lock:
                    chunk = None if errors else next(pending, None)
                if chunk is None:
                    return
                result = _write_chunk(period, drafts, chunk, splits_used)
                with lock:
                    counts.append(result)
        except BaseException as exc:  # handed to the caller below
            with lock:
                errors.append(exc)
        finally:
            connection.close()  # this thread's own connection

    threads = [
        threading.Thread(target=writer, name=f"billing-writer-{i}", daemon=True)
        for i in range(min(WRITERS, len(chunks)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return counts


def _values_fields() -> tuple[str, ...]:
    return (
        "status",
        "opening_balance",
        "lines_total",
        "adjustments_total",
        "payouts_total",
        "closing_balance",
        "frozen_inputs",
        "content_sha256",
        "disclosure_version",
        "disclosure_sha256",
        "computed_at",
        "requested_by",
        "requested_at",
    )


def _values(draft: Draft, now: datetime, *, frozen: bool = True) -> dict[str, Any]:
    """The statement's fields from its draft (``frozen=False``: without the frozen inputs,
    which ``_statement_row`` writes as text)."""
    content = draft.content
    return {
        "status": Statement.Status.DRAFT,  # a changed draft needs a fresh request
        "opening_balance": Decimal(content["opening_balance"]),
        "lines_total": Decimal(content["lines_total"]),
        "adjustments_total": Decimal(content["adjustments_total"]),
        "payouts_total": Decimal(content["payouts_total"]),
        "closing_balance": Decimal(content["closing_balance"]),
        "frozen_inputs": draft.frozen if frozen else None,
        "content_sha256": draft.sha256,
        "disclosure_version": content["disclosure"]["version"],
        "disclosure_sha256": content["disclosure"]["sha256"],
        "computed_at": now,
        "requested_by": None,
        "requested_at": None,
    }


_STATEMENT_COLUMNS = (
    "id",
    "owner_id",
    "period_id",
    "currency",
    *(f"{name}_id" if name == "requested_by" else name for name in _values_fields()),
)


def _statement_row(
    statement_id: uuid.UUID, period: Period, draft: Draft, now: datetime
) -> tuple[Any, ...]:
    """A new statement as a row of ``_STATEMENT_COLUMNS`` (frozen inputs as their JSON text,
    as computed: never parsed and serialised again)."""
    values = {
        **_values(draft, now, frozen=False),
        "status": str(Statement.Status.DRAFT),
        "frozen_inputs": draft.frozen_json,
    }
    return (
        statement_id,
        draft.owner_id,
        period.pk,
        draft.currency,
        *(values[name] for name in _values_fields()),
    )


_LINE_COLUMNS = ("statement_id", *LINE_FIELDS)


def line_rows(statement_id: uuid.UUID, content: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The lines of a statement with this content, as rows of ``_LINE_COLUMNS`` (decimals as
    their exact text): what the close writes, and what approval checks is stored."""
    rows: list[tuple[Any, ...]] = [
        (
            statement_id,
            position,
            StatementLine.Kind.GPU.value,
            d["gpu_id"],
            f"GPU {d['serial']}",
            d["starts_at"],
            d["ends_at"],
            d["share_bps"],
            d["in_service_s"],
            d["up_s"],
            d["down_s"],
            d["maintenance_s"],
            d["no_data_s"],
            d["availability"],
            d["utilization"],
            d["busy_gpu_hours"],
            d["energy_kwh"],
            d["gross"],
            d["hosting_fee"],
            d["power_cost"],
            d["management_fee"],
            d["net"],
            None,
        )
        for position, d in enumerate(content["lines"], start=1)
    ]
    offset = len(rows)
    rows += [
        (
            statement_id,
            offset + position,
            StatementLine.Kind.ADJUSTMENT.value,
            None,
            a["reason"][:300],
            None,
            None,
            None,
            0,
            0,
            0,
            0,
            0,
            None,
            None,
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            a["amount"],
            a["corrects_line"],
        )
        for position, a in enumerate(content["adjustments"], start=1)
    ]
    return rows


def _copy(table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """One COPY for a chunk's rows: no per-row statement, no parameter binding. Errors come
    out as Django's ``DatabaseError`` family, as they would from ``execute``."""
    if not rows:
        return
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


@transaction.atomic
def period_close_finish(*, period: Period, by: User, reason: str = "") -> Period:
    """closing → closed, once every statement of the period is published."""
    locked = lock_one(Period.objects.filter(pk=period.pk))
    if locked.status != Period.Status.CLOSING:
        raise ValidationError({"period": f"Period {locked} is {locked.status}, not closing."})
    unpublished = locked.statements.exclude(status=Statement.Status.PUBLISHED).count()
    if unpublished:
        raise ValidationError(
            {"period": f"{unpublished} statement(s) of {locked} are not published yet."}
        )
    Period.objects.filter(pk=locked.pk).update(
        status=Period.Status.CLOSED, closed_at=timezone.now()
    )
    locked.refresh_from_db()
    billing_audit(
        locked,
        action="billing.period.close_finish",
        by=by,
        reason=reason,
        before={"status": Period.Status.CLOSING.value},
        after={
            **values(locked, "status", "closed_at"),
            "statements": locked.statements.count(),
        },
    )
    return locked

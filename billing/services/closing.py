"""Closing a period: open → closing (drafts computed, recomputable) → closed (all published).

``period_close_run`` is resumable and idempotent. It computes every statement first (no
writes), then writes them in small transactions in a fixed order; a statement whose stored
hash already equals the recomputed one is left alone (that hash is the run's watermark). A
crash part-way leaves some statements written and the rest as they were, and running again
finishes the job with exactly the result of a clean run.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from accounts import selectors as accounts_selectors
from accounts.models import Disclosure, User
from billing.models import Period, Statement, StatementLine
from billing.selectors.pending import telemetry_pending
from billing.services.computing import Draft, StatementKey, statements_compute

WRITE_CHUNK = 100  # statements per transaction


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


@transaction.atomic
def period_close_start(*, period: Period, by: User) -> Period:
    """open → closing. Refuses with unprocessed telemetry, an earlier period not closed, a
    period not ended yet, or no published disclosure; changes nothing then."""
    del by
    locked = Period.objects.select_for_update().get(pk=period.pk)
    if locked.status != Period.Status.OPEN:
        raise ValidationError({"period": f"Period {locked} is {locked.status}, not open."})
    if locked.end > timezone.now():
        raise ValidationError({"period": f"Period {locked} has not ended yet."})
    earlier = (
        Period.objects.filter(start__lt=locked.start)
        .exclude(status=Period.Status.CLOSED)
        .order_by("start")
        .first()
    )
    if earlier is not None:
        raise ValidationError(
            {"period": f"Close {earlier} first: balances carry forward in order."}
        )
    refuse_pending_telemetry(locked, "close")
    _disclosure()
    updated = Period.objects.filter(pk=locked.pk, status=Period.Status.OPEN).update(
        status=Period.Status.CLOSING, closing_started_at=timezone.now()
    )
    assert updated == 1
    locked.refresh_from_db()
    return locked


def period_close_run(*, period: Period) -> CloseRun:
    """(Re)computes every draft of a closing period. Free to run again at any time."""
    period.refresh_from_db()
    if period.status != Period.Status.CLOSING:
        raise ValidationError(
            {"period": f"Period {period} is {period.status}; drafts are computed while closing."}
        )
    refuse_pending_telemetry(period, "compute statements for")
    drafts = statements_compute(period=period, disclosure=_disclosure())
    return statements_write(period=period, drafts=drafts)


def period_close(*, period: Period, by: User) -> CloseRun:
    """open → closing, then the drafts."""
    return period_close_run(period=period_close_start(period=period, by=by))


def statements_write(*, period: Period, drafts: dict[StatementKey, Draft]) -> CloseRun:
    written = unchanged = skipped = 0
    keys = sorted(drafts)
    for i in range(0, len(keys), WRITE_CHUNK):
        with transaction.atomic():
            existing = {
                (str(s.owner_id), s.currency): s
                for s in Statement.objects.select_for_update()
                .filter(period=period, owner_id__in=[k[0] for k in keys[i : i + WRITE_CHUNK]])
                .order_by("pk")
            }
            lines: list[StatementLine] = []
            for key in keys[i : i + WRITE_CHUNK]:
                statement = existing.get(key)
                if statement is not None and statement.status == Statement.Status.PUBLISHED:
                    skipped += 1  # published: corrected by reconciliation, never rewritten
                elif statement is not None and statement.content_sha256 == drafts[key].sha256:
                    unchanged += 1
                else:
                    lines += _write(period, drafts[key], statement)
                    written += 1
            StatementLine.objects.bulk_create(lines, batch_size=2000)
    removed = 0
    with transaction.atomic():
        stale = (
            Statement.objects.select_for_update()
            .filter(period=period)
            .exclude(status=Statement.Status.PUBLISHED)
        )
        for statement in stale.order_by("pk"):
            if (str(statement.owner_id), statement.currency) not in drafts:
                statement.lines.all().delete()
                statement.delete()
                removed += 1
    return CloseRun(written, unchanged, removed, skipped)


def _write(period: Period, draft: Draft, statement: Statement | None) -> list[StatementLine]:
    """Writes the statement row; returns its lines for the caller to insert in bulk."""
    content = draft.content
    values = {
        "status": Statement.Status.DRAFT,  # a changed draft needs a fresh request
        "opening_balance": Decimal(content["opening_balance"]),
        "lines_total": Decimal(content["lines_total"]),
        "adjustments_total": Decimal(content["adjustments_total"]),
        "payouts_total": Decimal(content["payouts_total"]),
        "closing_balance": Decimal(content["closing_balance"]),
        "frozen_inputs": draft.frozen,
        "content_sha256": draft.sha256,
        "disclosure_version": content["disclosure"]["version"],
        "disclosure_sha256": content["disclosure"]["sha256"],
        "computed_at": timezone.now(),
        "requested_by": None,
        "requested_at": None,
    }
    if statement is None:
        statement = Statement.objects.create(
            owner_id=draft.owner_id, period=period, currency=draft.currency, **values
        )
    else:
        statement.lines.all().delete()
        Statement.objects.filter(pk=statement.pk).update(**values)
    lines = [
        StatementLine(
            statement=statement,
            position=position,
            kind=StatementLine.Kind.GPU,
            gpu_id=d["gpu_id"],
            description=f"GPU {d['serial']}",
            starts_at=d["starts_at"],
            ends_at=d["ends_at"],
            share_bps=d["share_bps"],
            in_service_s=d["in_service_s"],
            up_s=d["up_s"],
            down_s=d["down_s"],
            maintenance_s=d["maintenance_s"],
            no_data_s=d["no_data_s"],
            availability=d["availability"],
            utilization=d["utilization"],
            busy_gpu_hours=d["busy_gpu_hours"],
            energy_kwh=d["energy_kwh"],
            gross=d["gross"],
            hosting_fee=d["hosting_fee"],
            power_cost=d["power_cost"],
            management_fee=d["management_fee"],
            net=d["net"],
        )
        for position, d in enumerate(content["lines"], start=1)
    ]
    offset = len(lines)
    lines += [
        StatementLine(
            statement=statement,
            position=offset + position,
            kind=StatementLine.Kind.ADJUSTMENT,
            description=a["reason"][:300],
            net=a["amount"],
            corrects_line_id=a["corrects_line"],
        )
        for position, a in enumerate(content["adjustments"], start=1)
    ]
    return lines


@transaction.atomic
def period_close_finish(*, period: Period, by: User) -> Period:
    """closing → closed, once every statement of the period is published."""
    del by
    locked = Period.objects.select_for_update().get(pk=period.pk)
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
    return locked

"""Accounting periods: calendar months in UTC unless said otherwise."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from django.core.exceptions import ValidationError

from billing.models import Period
from core.locks import lock


def month_bounds(*, year: int, month: int) -> tuple[datetime, datetime]:
    if not 1 <= month <= 12:
        raise ValidationError({"month": f"{month} is not a month (1-12)."})
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def period_for_month(*, year: int, month: int) -> Period:
    """The period of a calendar month, created open if it does not exist yet."""
    start, end = month_bounds(year=year, month=month)
    period, _ = Period.objects.get_or_create(start=start, defaults={"end": end})
    return period


def span_label(*, start: datetime, end: datetime) -> str:
    """How an operator reads a stretch of time: "February 2026" for a calendar month, else
    its UTC bounds."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if (start, end) == month_bounds(year=start.year, month=start.month):
        return f"{start:%B %Y}"
    return f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def period_label(period: Period) -> str:
    return span_label(start=period.start, end=period.end)


def period_not_open(*, start: datetime, end: datetime | None) -> Period | None:
    """The first period overlapping ``[start, end)`` (``end`` None: open-ended) that is
    closing or closed, or None. Locks every overlapping period, in start order, so a close
    that starts meanwhile waits for the caller's transaction and then sees its change."""
    overlapping = Period.objects.filter(end__gt=start)
    if end is not None:
        overlapping = overlapping.filter(start__lt=end)
    locked = sorted(lock(overlapping), key=lambda p: p.start)
    return next((p for p in locked if p.status != Period.Status.OPEN), None)


def periods_open_require(
    *,
    start: datetime,
    end: datetime | None,
    field: str,
    what: str,
    instead: str | Callable[[Period], str],
) -> None:
    """The one guard of every money input: refuses ``what``, which reaches over
    ``[start, end)`` (``end`` None: open-ended), when that reaches into a period that is
    closing or closed. Those periods' statements are computed (or published) from the inputs
    as they were; a change there would reach them only through reconciliation, so it is
    entered in an open period instead. Takes the periods' locks (``period_not_open``): a close
    that starts meanwhile waits for the caller's transaction, then sees its change.

    The message names the first such period and says what to do (``instead``: a text, or one
    made from that period)."""
    computed = period_not_open(start=start, end=end)
    if computed is None:
        return
    advice = instead(computed) if callable(instead) else instead
    raise ValidationError(
        {
            field: f"{what} reaches into period {computed} ({period_label(computed)}), which "
            f"is {computed.status}; the statements of a closing or closed period take no "
            f"changes. {advice}"
        }
    )

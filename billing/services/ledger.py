"""Payouts and manual adjustments: append-only rows, in periods that are still open."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Sum

from accounts.models import Owner, User
from billing.models import Adjustment, Payout, Period, Statement
from billing.services.audit import billing_audit, values
from billing.services.periods import periods_open_require
from core.locks import lock


def _cents(name: str, amount: Decimal) -> None:
    if not isinstance(amount, Decimal):
        raise ValidationError({name: "must be a Decimal amount."})
    if amount != amount.quantize(Decimal("0.01")):
        raise ValidationError({name: f"{amount} has fractions of a cent."})


def _owners_currency(owner: Owner, currency: str) -> None:
    """An owner has one ledger, in their billing currency: an amount in any other would open
    a second statement beside it."""
    if currency != owner.billing_currency:  # a valid code (the owner's is checked), or not
        raise ValidationError(
            {
                "currency": f"{owner} is billed in {owner.billing_currency}, not {currency}; "
                "amounts for them are in their billing currency."
            }
        )


def _last_published(owner: Owner, currency: str) -> Statement | None:
    return (
        Statement.objects.filter(owner=owner, currency=currency, status=Statement.Status.PUBLISHED)
        .select_related("period")
        .order_by("-period__start")
        .first()
    )


def balance_available(*, owner: Owner, currency: str) -> Decimal:
    """The last published closing balance, less payouts recorded after its period."""
    return _available(owner, currency, _last_published(owner, currency))


def _available(owner: Owner, currency: str, last: Statement | None) -> Decimal:
    if last is None:
        return Decimal("0.00")
    later = Payout.objects.filter(
        owner=owner, currency=currency, paid_on__gte=last.period.end.date()
    ).aggregate(total=Sum("amount"))["total"] or Decimal("0.00")
    return last.closing_balance - later


@transaction.atomic
def payout_record(
    *,
    owner: Owner,
    currency: str,
    amount: Decimal,
    paid_on: date,
    reference: str,
    by: User,
    reason: str = "",
) -> Payout:
    """Money paid to an owner, against their published balance. Refused if it exceeds the
    balance available, if its date falls in a period already closing or closed, or if it is
    dated before the end of the period of the owner's last published statement: such a
    payout would appear on no statement, and the balance would not count it."""
    _owners_currency(owner, currency)
    _cents("amount", amount)
    if amount <= 0:
        raise ValidationError({"amount": "A payout is a positive amount."})
    if not reference.strip():
        raise ValidationError({"reference": "Give the payment's reference."})
    at = datetime(paid_on.year, paid_on.month, paid_on.day, tzinfo=UTC)
    periods_open_require(  # the period its date's first second is in
        start=at,
        end=at + timedelta(seconds=1),
        field="paid_on",
        what=f"A payout dated {paid_on}",
        instead="Date it in an open period.",
    )
    lock(Owner.objects.filter(pk=owner.pk))  # one payout at a time per owner
    last = _last_published(owner, currency)
    if last is not None and at < last.period.end:
        raise ValidationError(
            {
                "paid_on": f"{paid_on} is before the end of {last.period}, whose {currency} "
                f"statement for {owner} is published; date the payout "
                f"{last.period.end.date()} or later."
            }
        )
    available = _available(owner, currency, last)
    if amount > available:
        raise ValidationError(
            {
                "amount": f"{amount} {currency} exceeds the balance available, "
                f"{available} {currency}."
            }
        )
    try:
        with transaction.atomic():
            payout = Payout.objects.create(
                owner=owner,
                currency=currency,
                amount=amount,
                paid_on=paid_on,
                reference=reference.strip(),
                created_by=by,
            )
    except IntegrityError as exc:
        raise ValidationError({"reference": f"Reference {reference} is already recorded."}) from exc
    billing_audit(
        payout,
        action="billing.payout.record",
        by=by,
        reason=reason,
        after={
            **values(payout, "owner_id", "currency", "amount", "paid_on", "reference"),
            "available_before": available,
        },
    )
    return payout


@transaction.atomic
def adjustment_add(
    *,
    owner: Owner,
    period: Period,
    currency: str,
    amount: Decimal,
    reason: str,
    by: User,
) -> Adjustment:
    """A manual amount for an owner in an open period (a correction names what it corrects
    through reconciliation instead)."""
    _owners_currency(owner, currency)
    _cents("amount", amount)
    if amount == 0:
        raise ValidationError({"amount": "An adjustment of zero changes nothing."})
    if not reason.strip():
        raise ValidationError({"reason": "Say why."})
    periods_open_require(
        start=period.start,
        end=period.end,
        field="period",
        what="The adjustment",
        instead="Adjustments go in an open period.",
    )
    adjustment = Adjustment.objects.create(
        owner=owner,
        period=period,
        currency=currency,
        amount=amount,
        reason=reason.strip(),
        source=Adjustment.Source.MANUAL,
        created_by=by,
    )
    billing_audit(
        adjustment,
        action="billing.adjustment.add",
        by=by,
        reason=reason,
        after=values(adjustment, "owner_id", "period_id", "currency", "amount", "source"),
    )
    return adjustment

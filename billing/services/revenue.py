"""Rate cards, rentals and pool amounts: what operators enter about money."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from accounts.models import User
from billing.models import ClusterBilling, Period, PoolRevenue, RateCard, Rental, RentalGpu
from billing.selectors.facts import pool_basis_in_force
from billing.services.audit import billing_audit, values
from billing.services.periods import month_bounds, periods_open_require
from core.inputs import require_instant
from core.instants import iso_z
from core.locks import lock, lock_one
from fleet.models import Cluster, Gpu, Placement


def _currency(value: str) -> str:
    if len(value) != 3 or not value.isalpha() or not value.isupper():
        raise ValidationError({"currency": f"{value!r} is not an ISO 4217 code (e.g. EUR)."})
    return value


def _not_negative(**values: Decimal) -> None:
    errors = {
        name: f"must not be negative (got {value})." for name, value in values.items() if value < 0
    }
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def rate_card_create(
    *,
    cluster: Cluster,
    currency: str,
    effective_from: datetime,
    effective_to: datetime | None,
    hosting_fee_per_gpu_month: Decimal,
    price_per_kwh: Decimal,
    pue: Decimal,
    management_fee_pct: Decimal,
    waive_hosting_in_operator_incidents: bool,
    waive_hosting_when_down: bool = False,
    by: User,
    reason: str = "",
) -> RateCard:
    require_instant(effective_from, field="effective_from")
    if effective_to is not None:
        require_instant(effective_to, field="effective_to")
        if effective_to <= effective_from:
            raise ValidationError({"effective_to": "must be after effective_from."})
    _not_negative(
        hosting_fee_per_gpu_month=hosting_fee_per_gpu_month,
        price_per_kwh=price_per_kwh,
        management_fee_pct=management_fee_pct,
    )
    if pue < 1:
        raise ValidationError({"pue": f"must be at least 1 (got {pue})."})
    if management_fee_pct > 100:
        raise ValidationError({"management_fee_pct": "must be at most 100."})
    # A period that is closing or closed was computed with the cards in force then: a card
    # back-dated into it would change them behind its statements' back.
    periods_open_require(
        start=effective_from,
        end=effective_to,
        field="effective_from",
        what="The rate card",
        instead=lambda computed: (
            f"Start the card at {iso_z(computed.end)} or later (correct a "
            "computed period with an adjustment)."
        ),
    )
    overlapping = RateCard.objects.filter(
        Q(effective_to__isnull=True) | Q(effective_to__gt=effective_from),
        cluster=cluster,
        currency=_currency(currency),
    )
    if effective_to is not None:
        overlapping = overlapping.filter(effective_from__lt=effective_to)
    clash = overlapping.order_by("effective_from").first()
    if clash is not None:
        raise ValidationError(
            {
                "effective_from": (
                    f"overlaps the {currency} rate card in force from "
                    f"{clash.effective_from:%Y-%m-%d %H:%M}"
                    f" (close it first: rate cards of a cluster and currency never overlap)."
                )
            }
        )
    try:
        with transaction.atomic():
            card = RateCard.objects.create(
                cluster=cluster,
                currency=currency,
                effective_from=effective_from,
                effective_to=effective_to,
                hosting_fee_per_gpu_month=hosting_fee_per_gpu_month,
                price_per_kwh=price_per_kwh,
                pue=pue,
                management_fee_pct=management_fee_pct,
                waive_hosting_in_operator_incidents=waive_hosting_in_operator_incidents,
                waive_hosting_when_down=waive_hosting_when_down,
                created_by=by,
            )
    except IntegrityError as exc:  # a concurrent card won the race; the trigger said no
        raise ValidationError({"effective_from": str(exc).splitlines()[0]}) from exc
    billing_audit(
        card,
        action="billing.rate_card.create",
        by=by,
        reason=reason,
        after=values(card, *_CARD_FIELDS),
    )
    return card


_CARD_FIELDS = (
    "cluster_id",
    "currency",
    "effective_from",
    "effective_to",
    "hosting_fee_per_gpu_month",
    "price_per_kwh",
    "pue",
    "management_fee_pct",
    "waive_hosting_in_operator_incidents",
    "waive_hosting_when_down",
)


@transaction.atomic
def rate_card_end(*, card: RateCard, at: datetime, by: User, reason: str = "") -> RateCard:
    """Ends ``card`` at ``at``, so a new card can follow it: the one change a card takes.

    Only earlier than it ends now (a card never grows over another), after it starts, and
    never inside a period that is closing or closed: those statements were computed with
    this card, and a change there would reach them only through reconciliation."""
    require_instant(at, field="at")
    # The periods first (core.locks.LOCK_ORDER), over the span the card still covers; then
    # the card, which must not have been ended meanwhile.
    seen = RateCard.objects.get(pk=card.pk)
    if at <= seen.effective_from:
        raise ValidationError(
            {"at": f"must be after the card starts ({iso_z(seen.effective_from)})."}
        )
    if seen.effective_to is not None and at >= seen.effective_to:
        raise ValidationError(
            {
                "at": f"the card already ends at {iso_z(seen.effective_to)}; "
                "its end only moves earlier."
            }
        )
    periods_open_require(
        start=at,
        end=seen.effective_to,
        field="at",
        what=f"Ending the card at {iso_z(at)}",
        instead=lambda computed: (
            f"They were computed with this card: end it at {iso_z(computed.end)} or later."
        ),
    )
    locked = lock_one(RateCard.objects.filter(pk=card.pk))
    if locked.effective_to != seen.effective_to:
        raise ValidationError({"at": "The card was ended meanwhile; look at it again."})
    before = values(locked, "effective_to")
    locked.effective_to = at
    locked.save(update_fields=["effective_to"])
    billing_audit(
        locked,
        action="billing.rate_card.end",
        by=by,
        reason=reason,
        before=before,
        after=values(locked, "effective_to"),
    )
    return locked


@transaction.atomic
def cluster_pool_basis_set(
    *, cluster: Cluster, basis: str, effective_from: datetime, reason: str, by: User
) -> ClusterBilling:
    """How ``cluster``'s pool is split from ``effective_from`` on (until a later change), as
    a new dated row: the settings before it stay, recorded with who changed them and why.

    A change takes effect only at a period's start — the first second of a calendar month,
    not inside a period already recorded — so each period is split by one basis, and never
    in a period that is closing or closed: its statements were split by the basis then, and
    reconciling it recomputes it with that basis, not with today's."""
    if basis not in ClusterBilling.PoolBasis.values:
        raise ValidationError(
            {
                "pool_split_basis": f"{basis!r} is not one of "
                f"{', '.join(ClusterBilling.PoolBasis.values)}."
            }
        )
    effective_from = require_instant(effective_from, field="effective_from")
    if effective_from != month_bounds(year=effective_from.year, month=effective_from.month)[0]:
        raise ValidationError(
            {
                "effective_from": f"{iso_z(effective_from)} is not the start of a month; a pool "
                "basis changes only at a period's start (the first second of a calendar "
                "month, e.g. 2026-04-01T00:00:00Z), so that a period has one basis."
            }
        )
    inside = Period.objects.filter(start__lt=effective_from, end__gt=effective_from).first()
    if inside is not None:
        raise ValidationError(
            {
                "effective_from": f"{iso_z(effective_from)} is inside period {inside}; a pool "
                f"basis changes only at a period's start (e.g. {iso_z(inside.end)})."
            }
        )
    if not reason.strip():
        raise ValidationError({"reason": "Say why the basis changes."})
    later = (
        ClusterBilling.objects.filter(cluster=cluster, effective_from__gt=effective_from)
        .order_by("effective_from")
        .first()
    )
    # Periods' locks first (the close takes them too), then the cluster's: one change of its
    # settings at a time.
    periods_open_require(
        start=effective_from,
        end=later.effective_from if later is not None else None,
        field="effective_from",
        what=f"The change of cluster {cluster}'s pool basis",
        instead=lambda computed: f"Make it take effect at {iso_z(computed.end)} or later.",
    )
    lock(Cluster.objects.filter(pk=cluster.pk))
    if ClusterBilling.objects.filter(cluster=cluster, effective_from=effective_from).exists():
        raise ValidationError(
            {
                "effective_from": f"cluster {cluster}'s pool basis already changes at "
                f"{iso_z(effective_from)}; a recorded change is never edited (add one at "
                "another period's start)."
            }
        )
    before = pool_basis_in_force(cluster_id=cluster.pk, at=effective_from)
    row = ClusterBilling.objects.create(
        cluster=cluster,
        effective_from=effective_from,
        pool_split_basis=basis,
        reason=reason.strip(),
        created_by=by,
    )
    billing_audit(
        row,
        action="billing.pool_basis.set",
        by=by,
        reason=reason,
        before={"pool_split_basis": before.value},
        after=values(row, "cluster_id", "effective_from", "pool_split_basis"),
    )
    return row


def _gpus_outside_cluster(
    gpus: Sequence[Gpu], cluster: Cluster, starts_at: datetime, ends_at: datetime
) -> list[Gpu]:
    """GPUs not placed in a node of cluster for the whole of [starts_at, ends_at)."""
    outside = []
    for gpu in gpus:
        placements = sorted(
            Placement.objects.filter(
                Q(valid_to__isnull=True) | Q(valid_to__gt=starts_at),
                gpu=gpu,
                node__cluster=cluster,
                valid_from__lt=ends_at,
            ).values_list("valid_from", "valid_to")
        )
        cursor = starts_at
        for valid_from, valid_to in placements:
            if valid_from > cursor:
                break
            cursor = max(cursor, valid_to) if valid_to is not None else ends_at
        if cursor < ends_at:
            outside.append(gpu)
    return outside


def _refuse_overlapping_rentals(
    gpus: Sequence[Gpu], starts_at: datetime, ends_at: datetime
) -> None:
    clash = (
        RentalGpu.objects.filter(
            gpu__in=gpus, rental__starts_at__lt=ends_at, rental__ends_at__gt=starts_at
        )
        .select_related("gpu", "rental")
        .order_by("gpu__serial", "rental__starts_at")
        .first()
    )
    if clash is not None:
        rental = clash.rental
        raise ValidationError(
            {
                "gpus": f"GPU {clash.gpu.serial} is already rented from "
                f"{iso_z(rental.starts_at)} to {iso_z(rental.ends_at)} (rental {rental.pk}), "
                f"which overlaps {iso_z(starts_at)} to {iso_z(ends_at)}; a GPU is in one "
                "rental at a time."
            }
        )


@transaction.atomic
def rental_create(
    *,
    cluster: Cluster,
    gpus: Sequence[Gpu],
    starts_at: datetime,
    ends_at: datetime,
    rate_per_gpu_hour: Decimal,
    currency: str,
    customer_reference: str,
    by: User,
    reason: str = "",
) -> Rental:
    """GPUs of a cluster rented over ``[starts_at, ends_at)``. Refused if a GPU is not in the
    cluster for the whole of it, is already rented over part of it, or if it reaches into a
    period that is not open."""
    require_instant(starts_at, field="starts_at")
    require_instant(ends_at, field="ends_at")
    if ends_at <= starts_at:
        raise ValidationError({"ends_at": "must be after starts_at."})
    _not_negative(rate_per_gpu_hour=rate_per_gpu_hour)
    currency = _currency(currency)
    if not gpus:
        raise ValidationError({"gpus": "name at least one GPU."})
    if len({gpu.pk for gpu in gpus}) != len(gpus):
        raise ValidationError({"gpus": "name each GPU once."})
    outside = _gpus_outside_cluster(gpus, cluster, starts_at, ends_at)
    if outside:
        serials = ", ".join(sorted(gpu.serial for gpu in outside))
        raise ValidationError(
            {"gpus": f"not in cluster {cluster} for the whole rental: {serials}."}
        )
    # Its periods' locks: a close waits for the rental, or the rental for the close.
    periods_open_require(
        start=starts_at,
        end=ends_at,
        field="starts_at",
        what="The rental",
        instead="Rentals go only into open periods: record a correction as an adjustment.",
    )
    # One rental of a GPU at a time: its row lock makes a concurrent rental of it wait,
    # then see this one.
    lock(Gpu.objects.filter(pk__in=[gpu.pk for gpu in gpus]))
    _refuse_overlapping_rentals(gpus, starts_at, ends_at)
    rental = Rental.objects.create(
        cluster=cluster,
        starts_at=starts_at,
        ends_at=ends_at,
        rate_per_gpu_hour=rate_per_gpu_hour,
        currency=currency,
        customer_reference=customer_reference,
        created_by=by,
    )
    try:
        with transaction.atomic():
            RentalGpu.objects.bulk_create([RentalGpu(rental=rental, gpu=gpu) for gpu in gpus])
    except IntegrityError as exc:  # a rental written by another path; the trigger said no
        raise ValidationError({"gpus": str(exc).splitlines()[0]}) from exc
    billing_audit(
        rental,
        action="billing.rental.create",
        by=by,
        reason=reason,
        after={
            **values(
                rental,
                "cluster_id",
                "starts_at",
                "ends_at",
                "rate_per_gpu_hour",
                "currency",
                "customer_reference",
            ),
            "gpus": sorted(gpu.serial for gpu in gpus),
        },
    )
    return rental


def pool_add(
    *,
    cluster: Cluster,
    period: Period,
    amount: Decimal,
    currency: str,
    description: str,
    by: User,
    reason: str = "",
) -> PoolRevenue:
    _not_negative(amount=amount)
    if amount != amount.quantize(Decimal("0.01")):
        raise ValidationError({"amount": f"{amount} has fractions of a cent."})
    with transaction.atomic():
        periods_open_require(
            start=period.start,
            end=period.end,
            field="period",
            what="The pool amount",
            instead="Pool amounts go only into open periods.",
        )
        pool = PoolRevenue.objects.create(
            cluster=cluster,
            period=period,
            amount=amount,
            currency=_currency(currency),
            description=description,
            created_by=by,
        )
        billing_audit(
            pool,
            action="billing.pool.add",
            by=by,
            reason=reason,
            after=values(pool, "cluster_id", "period_id", "amount", "currency", "description"),
        )
        return pool

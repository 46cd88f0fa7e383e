"""A rental goes only into open periods, and a GPU is in one rental at a time — refused in
the service with a message naming GPU and interval, and in the database whatever path
writes the rows."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, transaction

from billing.models import Period, Rental, RentalGpu
from billing.services.periods import period_for_month
from billing.services.revenue import rental_create
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
D = Decimal
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
DAY = dt.timedelta(days=1)


@pytest.fixture
def gpus(db: None) -> dict[str, Any]:
    f = s.fleet()
    return {"cluster": f.cluster, "sn1": s.gpu(f, "SN-1", slot=0), "sn2": s.gpu(f, "SN-2", slot=1)}


def rent(gpus, by, *, serials=("sn1",), starts_at=MARCH[0], ends_at=MARCH[1], ref="R-1"):
    return rental_create(
        cluster=gpus["cluster"],
        gpus=[gpus[name] for name in serials],
        starts_at=starts_at,
        ends_at=ends_at,
        rate_per_gpu_hour=D("1.00"),
        currency="EUR",
        customer_reference=ref,
        by=by,
    )


@pytest.mark.parametrize("status", [Period.Status.CLOSING, Period.Status.CLOSED])
def test_a_rental_reaching_into_a_period_not_open_is_refused(gpus, oscar, status):
    period = period_for_month(year=2026, month=3)
    Period.objects.filter(pk=period.pk).update(status=status)
    with pytest.raises(ValidationError) as caught:
        # Starts in February (no period row: open), ends inside March.
        rent(gpus, oscar, starts_at=MARCH[0] - DAY, ends_at=MARCH[0] + DAY)
    assert caught.value.message_dict == {
        "starts_at": [
            f"The rental reaches into period 2026-03 (March 2026), which is {status}; the "
            "statements of a closing or closed period take no changes. Rentals go only into "
            "open periods: record a correction as an adjustment."
        ]
    }
    assert not Rental.objects.exists()
    assert not RentalGpu.objects.exists()


def test_a_rental_ending_where_a_closing_period_starts_is_accepted(gpus, oscar):
    period = period_for_month(year=2026, month=3)
    Period.objects.filter(pk=period.pk).update(status=Period.Status.CLOSING)
    rental = rent(gpus, oscar, starts_at=MARCH[0] - DAY, ends_at=MARCH[0])
    assert list(rental.gpus.values_list("serial", flat=True)) == ["SN-1"]


def test_a_gpu_already_rented_over_part_of_the_interval_is_refused(gpus, oscar):
    first = rent(gpus, oscar, starts_at=MARCH[0] + 10 * DAY, ends_at=MARCH[0] + 20 * DAY)
    with pytest.raises(ValidationError) as caught:
        rent(gpus, oscar, serials=("sn2", "sn1"), ref="R-2")
    assert caught.value.message_dict == {
        "gpus": [
            f"GPU SN-1 is already rented from 2026-03-11T00:00:00Z to 2026-03-21T00:00:00Z "
            f"(rental {first.pk}), which overlaps 2026-03-01T00:00:00Z to "
            "2026-04-01T00:00:00Z; a GPU is in one rental at a time."
        ]
    }
    assert list(Rental.objects.values_list("customer_reference", flat=True)) == ["R-1"]
    assert list(RentalGpu.objects.values_list("gpu__serial", flat=True)) == ["SN-1"]


def test_back_to_back_rentals_and_other_gpus_are_accepted(gpus, oscar):
    rent(gpus, oscar, ends_at=MARCH[0] + 10 * DAY)
    rent(gpus, oscar, starts_at=MARCH[0] + 10 * DAY, ref="R-2")  # half-open: no overlap
    rent(gpus, oscar, serials=("sn2",), ref="R-3")
    assert sorted(RentalGpu.objects.values_list("rental__customer_reference", "gpu__serial")) == [
        ("R-1", "SN-1"),
        ("R-2", "SN-1"),
        ("R-3", "SN-2"),
    ]


def test_a_gpu_named_twice_is_refused(gpus, oscar):
    with pytest.raises(ValidationError, match="name each GPU once"):
        rent(gpus, oscar, serials=("sn1", "sn1"))
    assert not Rental.objects.exists()


def test_the_database_refuses_overlapping_rentals_of_a_gpu(gpus, oscar):
    rent(gpus, oscar, serials=("sn1", "sn2"))
    other = Rental.objects.create(
        cluster=gpus["cluster"],
        starts_at=MARCH[1] - DAY,
        ends_at=MARCH[1] + DAY,
        rate_per_gpu_hour=D("1.00"),
        currency="EUR",
    )
    with pytest.raises(IntegrityError, match=r"GPU .* is already in rental"), transaction.atomic():
        RentalGpu.objects.create(rental=other, gpu=gpus["sn1"])
    # Moving a rental's interval onto another rental of its GPU is refused too.
    later = Rental.objects.create(
        cluster=gpus["cluster"],
        starts_at=MARCH[1],
        ends_at=MARCH[1] + DAY,
        rate_per_gpu_hour=D("1.00"),
        currency="EUR",
    )
    RentalGpu.objects.create(rental=later, gpu=gpus["sn2"])
    with pytest.raises(IntegrityError, match="already in rental"), transaction.atomic():
        Rental.objects.filter(pk=later.pk).update(starts_at=MARCH[1] - DAY)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_rentals_of_a_gpu_cannot_both_pass(gpus, oscar):
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def create(ref: str) -> None:
        try:
            barrier.wait()
            try:
                rent(gpus, oscar, ref=ref)
                outcome = "created"
            except ValidationError as exc:
                outcome = "refused: " + exc.message_dict["gpus"][0].split(" is ")[0]
            with lock:
                outcomes.append(outcome)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create, args=(ref,)) for ref in ("R-1", "R-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["created", "refused: GPU SN-1"]
    assert RentalGpu.objects.count() == 1

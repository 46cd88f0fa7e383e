"""Usage is counted to the whole second: instants with a fraction of one are refused where
operators enter them and where a range is asked for, and "now" is cut to its second."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import RateCard, Rental
from billing.selectors.availability import (
    cluster_availability,
    gpu_availability,
    owner_availability,
)
from billing.selectors.earnings import owner_earnings
from billing.services.revenue import rate_card_create, rental_create
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
D = Decimal
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
HALF = dt.timedelta(microseconds=500_000)


def test_a_rental_starting_between_two_seconds_is_refused(oscar):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    with pytest.raises(ValidationError) as caught:
        rental_create(
            cluster=f.cluster,
            gpus=[gpu],
            starts_at=MARCH[0] + HALF,
            ends_at=MARCH[1],
            rate_per_gpu_hour=D("2.00"),
            currency="EUR",
            customer_reference="R-1",
            by=oscar,
        )
    assert caught.value.message_dict == {
        "starts_at": [
            "2026-03-01T00:00:00.500000Z has a fraction of a second; "
            "changes happen on whole seconds."
        ]
    }
    assert not Rental.objects.exists()


def test_a_rate_card_ending_between_two_seconds_is_refused(oscar):
    f = s.fleet()
    with pytest.raises(ValidationError) as caught:
        rate_card_create(
            cluster=f.cluster,
            currency="EUR",
            effective_from=MARCH[0],
            effective_to=MARCH[1] + HALF,
            hosting_fee_per_gpu_month=D("100.00"),
            price_per_kwh=D("0.20"),
            pue=D("1.5"),
            management_fee_pct=D("10"),
            waive_hosting_in_operator_incidents=False,
            by=oscar,
        )
    assert caught.value.message_dict == {
        "effective_to": [
            "2026-04-01T00:00:00.500000Z has a fraction of a second; "
            "changes happen on whole seconds."
        ]
    }
    assert not RateCard.objects.exists()


def test_an_availability_range_between_two_seconds_is_refused():
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    start = dt.datetime(2026, 3, 5, tzinfo=UTC) + HALF
    end = dt.datetime(2026, 3, 5, 0, 10, tzinfo=UTC)
    message = {
        "start": [
            "2026-03-05T00:00:00.500000Z has a fraction of a second; "
            "changes happen on whole seconds."
        ]
    }
    with pytest.raises(ValidationError) as caught:
        gpu_availability(gpu=gpu, start=start, end=end)
    assert caught.value.message_dict == message
    with pytest.raises(ValidationError, match="fraction of a second"):
        owner_availability(owner=owner, start=start, end=end)
    with pytest.raises(ValidationError, match="fraction of a second"):
        cluster_availability(cluster=f.cluster, start=start, end=end)


def test_running_earnings_count_up_to_the_whole_second_before_now(oscar, disclosure):
    world = s.worked_example(oscar)
    alice, bob = world["alice"], world["bob"]
    now = dt.datetime(2026, 3, 6, tzinfo=UTC)
    (a,) = owner_earnings(
        owner_ids=[alice.pk, bob.pk],
        start=MARCH[0],
        end=MARCH[1],
        now=now + HALF,
        disclosure=disclosure,
    )
    assert (a.end, a.to_date, a.final) == (now, True, False)
    # The same figures as at 00:00:00 sharp (tests/billing/test_earnings.py).
    assert (a.gross, a.hosting_fee, a.power_cost, a.management_fee, a.net) == (
        D("240.00"),
        D("16.13"),
        D("21.60"),
        D("24.00"),
        D("178.27"),
    )

"""Issue 21, item 5: one guard for every money input (``periods_open_require``).

Rentals, pool amounts, rate cards (added and ended), adjustments, payouts and pool bases
are each refused, with one message shape, when they reach into a period that is closing
or closed; the same inputs go through beside it."""

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from billing.models import Adjustment, ClusterBilling, Payout, Period, PoolRevenue, RateCard, Rental
from billing.services import ledger, revenue
from billing.services.periods import period_for_month
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
D = Decimal
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
DAY = dt.timedelta(days=1)
SHAPE = re.compile(
    r"^[A-Z].* reaches into period 2026-03 \(March 2026\), which is (closing|closed); the "
    r"statements of a closing or closed period take no changes\. [A-Z].*\.$"
)


@pytest.fixture
def world(oscar: Any) -> dict[str, Any]:
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar, effective_to=dt.datetime(2026, 6, 1, tzinfo=UTC))
    return {"fleet": f, "gpu": gpu, "alice": alice, "march": period_for_month(year=2026, month=3)}


def _inputs(w: dict[str, Any], by: Any, month: Period) -> dict[str, Callable[[], Any]]:
    """Each money input, aimed at ``month``."""
    cluster, start = w["fleet"].cluster, month.start
    return {
        "rental": lambda: revenue.rental_create(
            cluster=cluster,
            gpus=[w["gpu"]],
            starts_at=start + DAY,
            ends_at=start + 2 * DAY,
            rate_per_gpu_hour=D("1.00"),
            currency="EUR",
            customer_reference="R",
            by=by,
        ),
        "pool": lambda: revenue.pool_add(
            cluster=cluster, period=month, amount=D("1.00"), currency="EUR", description="", by=by
        ),
        "rate card": lambda: revenue.rate_card_create(
            cluster=cluster,
            currency="USD",
            effective_from=start,
            effective_to=None,
            hosting_fee_per_gpu_month=D("1"),
            price_per_kwh=D("0.1"),
            pue=D("1.2"),
            management_fee_pct=D("5"),
            waive_hosting_in_operator_incidents=False,
            by=by,
        ),
        "rate card end": lambda: revenue.rate_card_end(
            card=RateCard.objects.get(currency="EUR"), at=start + DAY, by=by
        ),
        "adjustment": lambda: ledger.adjustment_add(
            owner=w["alice"], period=month, currency="EUR", amount=D("-1.00"), reason="r", by=by
        ),
        "payout": lambda: ledger.payout_record(
            owner=w["alice"],
            currency="EUR",
            amount=D("1.00"),
            paid_on=(start + DAY).date(),
            reference="P-1",
            by=by,
        ),
        "pool basis": lambda: revenue.cluster_pool_basis_set(
            cluster=cluster, basis="busy_gpu_hours", effective_from=start, reason="r", by=by
        ),
    }


@pytest.mark.parametrize("status", [Period.Status.CLOSING, Period.Status.CLOSED])
def test_every_money_input_is_refused_in_a_period_not_open_in_one_shape(world, oscar, status):
    Period.objects.filter(pk=world["march"].pk).update(status=status)
    fields = {}
    for name, enter in _inputs(world, oscar, world["march"]).items():
        with pytest.raises(ValidationError) as refused:
            enter()
        ((field, (message,)),) = refused.value.message_dict.items()
        assert SHAPE.match(message), (name, message)
        assert f"which is {status};" in message
        fields[name] = field
    assert fields == {
        "rental": "starts_at",
        "pool": "period",
        "rate card": "effective_from",
        "rate card end": "at",
        "adjustment": "period",
        "payout": "paid_on",
        "pool basis": "effective_from",
    }
    assert not Rental.objects.exists()
    assert not PoolRevenue.objects.exists()
    assert list(RateCard.objects.values_list("currency", "effective_to")) == [
        ("EUR", dt.datetime(2026, 6, 1, tzinfo=UTC))
    ]
    assert not Adjustment.objects.exists()
    assert not Payout.objects.exists()
    assert not ClusterBilling.objects.exists()


def test_the_same_inputs_go_into_the_open_period_after_it(world, oscar):
    Period.objects.filter(pk=world["march"].pk).update(status=Period.Status.CLOSED)
    april = period_for_month(year=2026, month=4)
    refused = {}
    for name, enter in _inputs(world, oscar, april).items():
        try:
            enter()
        except ValidationError as error:
            refused[name] = error.messages
    # A payout needs a published balance: the guard lets it through to that check.
    assert refused == {"payout": ["1.00 EUR exceeds the balance available, 0.00 EUR."]}
    assert Rental.objects.count() == PoolRevenue.objects.count() == 1
    assert Adjustment.objects.count() == ClusterBilling.objects.count() == 1
    assert RateCard.objects.count() == 2

"""An owner's adjustments and payouts are in the owner's billing currency: any other code
would open a second statement beside theirs. Refused with the reason, nothing written."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Adjustment, Payout
from billing.services.ledger import adjustment_add, payout_record
from billing.services.periods import period_for_month
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal


@pytest.mark.parametrize("currency", ["usd", "eur", "EURO", "E1R", "USD"])
def test_an_adjustment_in_another_currency_is_refused(oscar, currency):
    alice = s.owner("Alice Compute Ltd")  # billed in EUR
    period = period_for_month(year=2026, month=3)
    with pytest.raises(ValidationError) as caught:
        adjustment_add(
            owner=alice, period=period, currency=currency, amount=D("5.00"), reason="x", by=oscar
        )
    assert caught.value.message_dict == {
        "currency": [
            f"Alice Compute Ltd is billed in EUR, not {currency}; amounts for them are in "
            "their billing currency."
        ]
    }
    assert not Adjustment.objects.exists()


def test_an_adjustment_in_the_billing_currency_is_accepted(oscar):
    alice = s.owner("Alice Compute Ltd")
    period = period_for_month(year=2026, month=3)
    adjustment_add(
        owner=alice, period=period, currency="EUR", amount=D("5.00"), reason="x", by=oscar
    )
    assert list(Adjustment.objects.values_list("currency", "amount")) == [("EUR", D("5.00"))]


@pytest.mark.parametrize("currency", ["eur", "USD"])
def test_a_payout_in_another_currency_is_refused(oscar, currency):
    bob = s.owner("Bob Chen", currency="GBP")
    with pytest.raises(ValidationError) as caught:
        payout_record(
            owner=bob,
            currency=currency,
            amount=D("1.00"),
            paid_on=dt.date(2026, 3, 5),
            reference="P-1",
            by=oscar,
        )
    assert list(caught.value.message_dict) == ["currency"]
    assert caught.value.message_dict["currency"] == [
        f"Bob Chen is billed in GBP, not {currency}; amounts for them are in their billing "
        "currency."
    ]
    assert not Payout.objects.exists()

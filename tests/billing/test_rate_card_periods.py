"""Issue 21, defect 2: a rate card goes only where no statement was computed without it.

``rate_card_create`` checked no period, so a card could be back-dated into a period that is
closing or closed, whose statements were computed with the cards in force then."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Period, RateCard
from billing.services.closing import period_close
from billing.services.periods import period_for_month
from billing.services.revenue import rate_card_create
from fleet.models import Cluster, Gpu

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


def _card(cluster: Cluster, by, start: dt.datetime, end: dt.datetime | None) -> RateCard:
    return rate_card_create(
        cluster=cluster,
        currency="EUR",
        effective_from=start,
        effective_to=end,
        hosting_fee_per_gpu_month=Decimal("100.00"),
        price_per_kwh=Decimal("0.20"),
        pue=Decimal("1.5"),
        management_fee_pct=Decimal("10"),
        waive_hosting_in_operator_incidents=False,
        by=by,
    )


@pytest.fixture
def march_closing(oscar, disclosure):
    from tests.billing import scenario as s

    s.alice_up_all_month(oscar, *MARCH)
    march = period_for_month(year=2026, month=3)
    period_close(period=march, by=oscar)
    assert Period.objects.get(pk=march.pk).status == Period.Status.CLOSING
    site = Gpu.objects.get().placements.get().node.cluster.site
    return Cluster.objects.create(site=site, code="b", name="B")


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (dt.datetime(2026, 3, 15, tzinfo=UTC), None),  # from inside it, open-ended
        (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, 0, 0, 1, tzinfo=UTC)),
        (dt.datetime(2025, 1, 1, tzinfo=UTC), dt.datetime(2026, 5, 1, tzinfo=UTC)),  # over it
    ],
)
def test_a_rate_card_reaching_into_a_closing_period_is_refused(march_closing, oscar, start, end):
    with pytest.raises(ValidationError) as refused:
        _card(march_closing, oscar, start, end)
    assert refused.value.message_dict == {
        "effective_from": [
            "The rate card reaches into period 2026-03 (March 2026), which is closing; the "
            "statements of a closing or closed period take no changes. Start the card at "
            "2026-04-01T00:00:00Z or later (correct a computed period with an adjustment)."
        ]
    }
    assert not RateCard.objects.filter(cluster=march_closing).exists()


def test_a_rate_card_around_a_closing_period_is_accepted(march_closing, oscar):
    before = _card(march_closing, oscar, dt.datetime(2026, 1, 1, tzinfo=UTC), MARCH[0])
    after = _card(march_closing, oscar, MARCH[1], None)
    assert list(RateCard.objects.filter(cluster=march_closing).order_by("effective_from")) == [
        before,
        after,
    ]

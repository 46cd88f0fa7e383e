"""Operators' money input: rate cards, rentals and pools refuse bad input, change nothing."""

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from billing.models import Period, PoolRevenue, RateCard, Rental
from billing.services.periods import month_bounds, period_for_month
from billing.services.revenue import (
    cluster_pool_basis_set,
    pool_add,
    rate_card_create,
    rate_card_end,
    rental_create,
)
from fleet.models import Cluster, Gpu, GpuModel, Node, Placement, Site
from tests.accounts.two_factor import console_login

pytestmark = pytest.mark.django_db
D = Decimal
T = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def fleet():
    site = Site.objects.create(code="fra1", name="Frankfurt 1", country="DE")
    a = Cluster.objects.create(site=site, code="a", name="A")
    b = Cluster.objects.create(site=site, code="b", name="B")
    node_a = Node.objects.create(cluster=a, hostname="a-01")
    node_b = Node.objects.create(cluster=b, hostname="b-01")
    model = GpuModel.objects.create(name="NVIDIA H100 80GB HBM3", memory_mib=81559, tdp_w=700)
    gpu_1 = Gpu.objects.create(nvml_uuid="GPU-1", serial="SN-1", model=model)
    gpu_2 = Gpu.objects.create(nvml_uuid="GPU-2", serial="SN-2", model=model)
    Placement.objects.create(
        gpu=gpu_1, node=node_a, slot=0, valid_from=datetime(2026, 1, 1, tzinfo=UTC)
    )
    # SN-2 moves from cluster B to cluster A on March 10.
    moved = datetime(2026, 3, 10, tzinfo=UTC)
    Placement.objects.create(
        gpu=gpu_2, node=node_b, slot=0, valid_from=datetime(2026, 1, 1, tzinfo=UTC), valid_to=moved
    )
    Placement.objects.create(gpu=gpu_2, node=node_a, slot=1, valid_from=moved)
    return {"a": a, "b": b, "sn1": gpu_1, "sn2": gpu_2}


def card(cluster, oscar, **overrides):
    values = {
        "cluster": cluster,
        "currency": "EUR",
        "effective_from": T,
        "effective_to": None,
        "hosting_fee_per_gpu_month": D("120.00"),
        "price_per_kwh": D("0.21"),
        "pue": D("1.35"),
        "management_fee_pct": D("12.5"),
        "waive_hosting_in_operator_incidents": True,
        "by": oscar,
    }
    values.update(overrides)
    return rate_card_create(**values)


def test_rate_card_overlap_is_refused_with_the_clashing_card_named(fleet, oscar):
    card(fleet["a"], oscar, effective_to=datetime(2026, 4, 1, tzinfo=UTC))
    with pytest.raises(
        ValidationError, match="overlaps the EUR rate card in force from 2026-03-01 00:00"
    ):
        card(fleet["a"], oscar, effective_from=datetime(2026, 3, 31, tzinfo=UTC))
    card(fleet["a"], oscar, effective_from=datetime(2026, 4, 1, tzinfo=UTC))  # touching is fine
    card(fleet["b"], oscar)  # another cluster
    assert RateCard.objects.count() == 3


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"price_per_kwh": D("-0.01")}, "price_per_kwh", "must not be negative"),
        ({"pue": D("0.9")}, "pue", "must be at least 1"),
        ({"management_fee_pct": D("101")}, "management_fee_pct", "must be at most 100"),
        ({"currency": "eur"}, "currency", "is not an ISO 4217 code"),
        ({"effective_to": T}, "effective_to", "must be after effective_from"),
    ],
)
def test_rate_card_bad_input_names_the_field(fleet, oscar, overrides, field, message):
    with pytest.raises(ValidationError, match=message) as caught:
        card(fleet["a"], oscar, **overrides)
    assert field in caught.value.message_dict
    assert RateCard.objects.count() == 0


def test_rental_over_gpus_in_the_cluster(fleet, oscar):
    rental = rental_create(
        cluster=fleet["a"],
        gpus=[fleet["sn1"], fleet["sn2"]],
        starts_at=datetime(2026, 3, 10, tzinfo=UTC),
        ends_at=datetime(2026, 3, 20, tzinfo=UTC),
        rate_per_gpu_hour=D("2.10"),
        currency="EUR",
        customer_reference="ACME-7",
        by=oscar,
    )
    assert sorted(rental.gpus.values_list("serial", flat=True)) == ["SN-1", "SN-2"]


def test_rental_over_a_gpu_not_in_the_cluster_for_the_whole_time_is_refused(fleet, oscar):
    with pytest.raises(ValidationError, match=r"not in cluster fra1/a for the whole rental: SN-2"):
        rental_create(
            cluster=fleet["a"],
            gpus=[fleet["sn1"], fleet["sn2"]],
            starts_at=datetime(2026, 3, 9, tzinfo=UTC),
            ends_at=datetime(2026, 3, 20, tzinfo=UTC),
            rate_per_gpu_hour=D("2.10"),
            currency="EUR",
            customer_reference="",
            by=oscar,
        )
    assert Rental.objects.count() == 0


def test_rental_with_a_negative_rate_is_refused(fleet, oscar):
    with pytest.raises(ValidationError, match="rate_per_gpu_hour"):
        rental_create(
            cluster=fleet["a"],
            gpus=[fleet["sn1"]],
            starts_at=T,
            ends_at=datetime(2026, 3, 2, tzinfo=UTC),
            rate_per_gpu_hour=D("-1"),
            currency="EUR",
            customer_reference="",
            by=oscar,
        )


def test_pool_for_a_closed_period_is_refused(fleet, oscar):
    period = period_for_month(year=2026, month=2)
    Period.objects.filter(pk=period.pk).update(status=Period.Status.CLOSED)
    with pytest.raises(
        ValidationError,
        match=r"The pool amount reaches into period 2026-02 \(February 2026\), which is closed; "
        r"the statements of a closing or closed period take no changes\. Pool amounts go only "
        r"into open periods\.",
    ):
        pool_add(
            cluster=fleet["a"],
            period=period,
            amount=D("1000.00"),
            currency="EUR",
            description="Feb marketplace payout",
            by=oscar,
        )
    assert PoolRevenue.objects.count() == 0


def test_pool_amount_with_fractions_of_a_cent_is_refused(fleet, oscar):
    period = period_for_month(year=2026, month=3)
    with pytest.raises(ValidationError, match="has fractions of a cent"):
        pool_add(
            cluster=fleet["a"],
            period=period,
            amount=D("10.001"),
            currency="EUR",
            description="",
            by=oscar,
        )
    pool = pool_add(
        cluster=fleet["a"],
        period=period,
        amount=D("10.00"),
        currency="EUR",
        description="",
        by=oscar,
    )
    assert pool.amount == D("10.00")


def test_pool_basis_is_a_cluster_setting(fleet, oscar):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    assert (
        cluster_pool_basis_set(
            cluster=fleet["a"], basis="busy_gpu_hours", effective_from=at, reason="r", by=oscar
        ).pool_split_basis
        == "busy_gpu_hours"
    )
    with pytest.raises(ValidationError, match="'revenue' is not one of up_seconds, busy_gpu_hours"):
        cluster_pool_basis_set(
            cluster=fleet["a"], basis="revenue", effective_from=at, reason="r", by=oscar
        )


@pytest.mark.parametrize(("year", "month", "days"), [(2026, 2, 28), (2028, 2, 29), (2026, 12, 31)])
def test_month_bounds(year, month, days):
    start, end = month_bounds(year=year, month=month)
    assert (end - start).days == days
    assert start.tzinfo is UTC


# Ending a rate card so that a new one can follow: the one change a card takes.
APRIL = datetime(2026, 4, 1, tzinfo=UTC)
MAY = datetime(2026, 5, 1, tzinfo=UTC)


def test_an_open_card_ends_and_a_new_one_follows(fleet, oscar):
    first = card(fleet["a"], oscar)
    with pytest.raises(ValidationError, match="close it first"):
        card(fleet["a"], oscar, effective_from=APRIL)
    rate_card_end(card=first, at=APRIL, by=oscar)
    card(fleet["a"], oscar, effective_from=APRIL)
    assert list(RateCard.objects.order_by("effective_from").values_list("effective_to")) == [
        (APRIL,),
        (None,),
    ]


@pytest.mark.parametrize(
    ("at", "message"),
    [
        (datetime(2026, 3, 1, tzinfo=UTC), "must be after the card starts (2026-03-01T00:00:00Z)"),
        (datetime(2026, 4, 1, 0, 0, 0, 500_000, tzinfo=UTC), "fraction of a second"),
        (MAY, "the card already ends at 2026-04-01T00:00:00Z; its end only moves earlier"),
    ],
)
def test_a_card_ends_only_earlier_after_it_starts_on_a_whole_second(fleet, oscar, at, message):
    ended = card(fleet["a"], oscar, effective_to=APRIL)
    with pytest.raises(ValidationError, match=re.escape(message)):
        rate_card_end(card=ended, at=at, by=oscar)
    assert RateCard.objects.get().effective_to == APRIL


def test_a_card_never_ends_inside_a_period_its_statements_were_computed_with(fleet, oscar):
    open_card = card(fleet["a"], oscar)
    march = period_for_month(year=2026, month=3)
    Period.objects.filter(pk=march.pk).update(status=Period.Status.CLOSING)
    with pytest.raises(
        ValidationError,
        match=r"into period 2026-03 \(March 2026\), which is closing; .* end it at 2026-04-01",
    ):
        rate_card_end(card=open_card, at=datetime(2026, 3, 20, tzinfo=UTC), by=oscar)
    assert RateCard.objects.get().effective_to is None
    rate_card_end(card=open_card, at=APRIL, by=oscar)  # after the period: fine
    assert RateCard.objects.get().effective_to == APRIL


def test_the_console_ends_a_card_with_a_date(fleet, oscar):
    open_card = card(fleet["a"], oscar)
    client = console_login(Client(), oscar)
    url = "/admin/billing/ratecard/"
    chosen = {"action": "end_card", "_selected_action": [str(open_card.pk)]}
    page = client.post(url, chosen)
    assert page.status_code == 200 and "End a rate card" in page.content.decode()
    refused = client.post(url, {**chosen, "apply": "1", "at": "2026-02-01 00:00:00"})
    assert "must be after the card starts" in refused.content.decode()
    done = client.post(url, {**chosen, "apply": "1", "at": "2026-04-01 00:00:00"}, follow=True)
    assert done.status_code == 200
    assert RateCard.objects.get().effective_to == APRIL

"""Issue 21, defect 1: a console form writes through its service once, after every check.

A payout entered in the console used to be written in the form's ``clean``; Django's
unique check then found the new row, showed "Payout with this Reference already exists"
and left the payout committed, so the operator's retry was refused."""

import datetime as dt
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import ClusterBilling, Payout, Period, RateCard
from billing.services.closing import period_close, period_close_finish
from billing.services.ledger import adjustment_add
from billing.services.periods import period_for_month
from tests.accounts.two_factor import console_login
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


@pytest.fixture
def alice_paid_in_march(oscar, olga, disclosure):
    """Alice's March statement published with a 500.00 EUR credit, March closed: she has a
    balance that can be paid out in April."""
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar)
    s.windows(gpu, MARCH[0], MARCH[0] + dt.timedelta(hours=2), node=f.node)
    s.rebuild(*MARCH)
    march = period_for_month(year=2026, month=3)
    adjustment_add(
        owner=alice,
        period=march,
        currency="EUR",
        amount=Decimal("500.00"),
        reason="credit",
        by=oscar,
    )
    period_close(period=march, by=oscar)
    s.publish_all(march, oscar, olga)
    period_close_finish(period=march, by=oscar)
    assert Period.objects.get(pk=march.pk).status == Period.Status.CLOSED
    return alice


def test_a_payout_entered_in_the_console_is_saved_once_and_shown_as_saved(
    alice_paid_in_march, oscar
):
    client = console_login(Client(), oscar)
    entered = {
        "owner": alice_paid_in_march.pk,
        "currency": "EUR",
        "amount": "10.00",
        "paid_on": "2026-04-02",
        "reference": "P-1",
    }
    response = client.post("/admin/billing/payout/add/", entered, follow=True)
    text = response.content.decode()
    assert "already exists" not in text
    assert "was added successfully" in text
    assert response.redirect_chain[-1][0] == "/admin/billing/payout/"
    payout = Payout.objects.get()
    assert (payout.reference, payout.amount, payout.created_by) == ("P-1", Decimal("10.00"), oscar)

    # The same payout entered again is refused, saying why, and nothing is written.
    again = client.post("/admin/billing/payout/add/", entered)
    assert again.status_code == 200
    assert "Reference P-1 is already recorded." in again.content.decode()
    assert "was added successfully" not in again.content.decode()
    assert Payout.objects.count() == 1


def test_a_refused_payout_writes_nothing_and_a_corrected_one_is_saved(alice_paid_in_march, oscar):
    client = console_login(Client(), oscar)
    entered = {
        "owner": alice_paid_in_march.pk,
        "currency": "EUR",
        "amount": "10000.00",
        "paid_on": "2026-04-02",
        "reference": "P-2",
    }
    refused = client.post("/admin/billing/payout/add/", entered)
    assert "exceeds the balance available" in refused.content.decode()
    assert not Payout.objects.exists()
    saved = client.post("/admin/billing/payout/add/", entered | {"amount": "20.00"}, follow=True)
    assert "was added successfully" in saved.content.decode()
    assert list(Payout.objects.values_list("reference", "amount")) == [("P-2", Decimal("20.00"))]


def test_a_rate_card_entered_in_the_console_is_saved_once(oscar):
    f = s.fleet()
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/billing/ratecard/add/",
        {
            "cluster": f.cluster.pk,
            "currency": "EUR",
            "effective_from_0": "2026-03-01",
            "effective_from_1": "00:00:00",
            "hosting_fee_per_gpu_month": "100",
            "price_per_kwh": "0.2",
            "pue": "1.5",
            "management_fee_pct": "10",
        },
        follow=True,
    )
    assert "was added successfully" in response.content.decode()
    card = RateCard.objects.get()
    assert (card.cluster, card.effective_from, card.created_by) == (f.cluster, MARCH[0], oscar)


def test_a_pool_basis_change_is_entered_in_the_console_and_refused_where_computed(oscar):
    f = s.fleet()
    Period.objects.create(start=MARCH[0], end=MARCH[1], status=Period.Status.CLOSED)
    client = console_login(Client(), oscar)
    entered = {
        "cluster": f.cluster.pk,
        "pool_split_basis": "busy_gpu_hours",
        "effective_from_0": "2026-03-01",
        "effective_from_1": "00:00:00",
        "reason": "the marketplace pays by busy hours",
    }
    refused = client.post("/admin/billing/clusterbilling/add/", entered)
    assert refused.status_code == 200
    assert "reaches into period 2026-03 (March 2026), which is closed" in refused.content.decode()
    assert not ClusterBilling.objects.exists()

    saved = client.post(
        "/admin/billing/clusterbilling/add/",
        entered | {"effective_from_0": "2026-04-01"},
        follow=True,
    )
    assert "was added successfully" in saved.content.decode()
    change = ClusterBilling.objects.get()
    assert (change.effective_from, change.pool_split_basis, change.created_by) == (
        MARCH[1],
        "busy_gpu_hours",
        oscar,
    )
    listed = client.get("/admin/billing/clusterbilling/").content.decode()
    assert "the marketplace pays by busy hours" in listed


def test_the_service_runs_once_in_save_model_and_a_refusal_leaves_no_trace(
    alice_paid_in_march, oscar
):
    """accounts.admin_toolkit: the form checks shape, save_model calls the service once; a
    refusal rolls back the page's transaction (no row, no audit entry, no admin log entry)
    and the page is shown again with the service's words."""
    from django.contrib.admin.models import LogEntry

    from accounts.models import AuditEntry

    client = console_login(Client(), oscar)
    entered = {
        "owner": alice_paid_in_march.pk,
        "currency": "EUR",
        "amount": "10000.00",
        "paid_on": "2026-04-02",
        "reference": "P-3",
        "reason": "April payout",
    }
    payouts = AuditEntry.objects.filter(action="billing.payout.record")
    refused = client.post("/admin/billing/payout/add/", entered)
    assert refused.status_code == 200
    assert "10000.00 EUR exceeds the balance available, 399.64 EUR." in refused.content.decode()
    assert (Payout.objects.count(), payouts.count(), LogEntry.objects.count()) == (0, 0, 0)

    client.post("/admin/billing/payout/add/", entered | {"amount": "30.00"})
    payout = Payout.objects.get()
    entry = payouts.get()
    assert (entry.actor, entry.reason, entry.object_id) == (oscar, "April payout", str(payout.pk))
    assert LogEntry.objects.get().object_id == str(payout.pk)

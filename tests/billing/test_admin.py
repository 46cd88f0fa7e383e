"""The billing console: periods closed by an action, statements published by two operators,
money entered through service-backed forms, nothing published editable."""

import datetime as dt
from decimal import Decimal

import pytest
from django.test import Client

from accounts import services as accounts
from billing.models import Payout, Period, RateCard, Statement
from billing.services.periods import period_for_month
from tests.accounts.two_factor import console_login
from tests.billing import scenario as s
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


@pytest.fixture
def closed_world(oscar, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar)
    s.windows(gpu, MARCH[0], MARCH[0] + dt.timedelta(hours=2), node=f.node)
    s.rebuild(*MARCH)
    return {"fleet": f, "alice": alice, "period": period_for_month(year=2026, month=3)}


def _action(client, url, action, ids):
    return client.post(
        url, {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True
    )


def test_close_then_publish_by_two_operators_in_the_console(closed_world, oscar):
    olga = accounts.user_create(
        email="olga@steward.example", password=PASSWORD, is_staff=True, is_superuser=True
    )
    first = console_login(Client(), oscar)
    second = console_login(Client(), olga)
    period = closed_world["period"]
    response = _action(first, "/admin/billing/period/", "close", [period.pk])
    assert response.status_code == 200
    assert Period.objects.get(pk=period.pk).status == Period.Status.CLOSING
    statement = Statement.objects.get()

    _action(first, "/admin/billing/statement/", "request_publish", [statement.pk])
    response = _action(first, "/admin/billing/statement/", "approve_publish", [statement.pk])
    assert "another operator must approve it" in response.content.decode()
    assert Statement.objects.get().status == Statement.Status.PUBLISH_REQUESTED
    _action(second, "/admin/billing/statement/", "approve_publish", [statement.pk])
    published = Statement.objects.get()
    assert (published.status, published.approved_by) == (Statement.Status.PUBLISHED, olga)

    # A published statement's page shows no save button, and a POST changes nothing.
    page = first.get(f"/admin/billing/statement/{statement.pk}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    first.post(f"/admin/billing/statement/{statement.pk}/change/", {"currency": "USD"})
    assert Statement.objects.get().currency == "EUR"


def test_money_forms_call_the_services_and_show_their_refusals(closed_world, oscar):
    client = console_login(Client(), oscar)
    cluster = closed_world["fleet"].cluster
    response = client.post(
        "/admin/billing/ratecard/add/",
        {
            "cluster": cluster.pk,
            "currency": "EUR",
            "effective_from_0": "2026-03-10",
            "effective_from_1": "00:00:00",
            "hosting_fee_per_gpu_month": "100",
            "price_per_kwh": "0.2",
            "pue": "1.5",
            "management_fee_pct": "10",
        },
    )
    assert response.status_code == 200
    assert "overlaps the EUR rate card in force from 2025-01-01 00:00" in response.content.decode()
    assert RateCard.objects.count() == 1

    response = client.post(
        "/admin/billing/payout/add/",
        {
            "owner": closed_world["alice"].pk,
            "currency": "EUR",
            "amount": "10.00",
            "paid_on": "2026-05-02",
            "reference": "P-1",
        },
    )
    assert "exceeds the balance available, 0.00 EUR" in response.content.decode()
    assert not Payout.objects.exists()
    assert Decimal("0") == sum(p.amount for p in Payout.objects.all())


def test_a_read_only_operator_can_neither_close_nor_publish(closed_world, oscar):
    from django.contrib.auth.models import Permission

    rita = accounts.user_create(email="rita@steward.example", password=PASSWORD, is_staff=True)
    rita.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="billing", codename__in=["view_period", "view_statement"]
        )
    )
    reader = console_login(Client(), rita)
    period = closed_world["period"]
    assert reader.get("/admin/billing/period/").status_code == 200
    _action(reader, "/admin/billing/period/", "close", [period.pk])
    assert Period.objects.get(pk=period.pk).status == Period.Status.OPEN
    assert not Statement.objects.exists()

    officer = console_login(Client(), oscar)
    _action(officer, "/admin/billing/period/", "close", [period.pk])
    statement = Statement.objects.get()
    _action(reader, "/admin/billing/statement/", "request_publish", [statement.pk])
    assert Statement.objects.get().status == Statement.Status.DRAFT


def test_two_billing_officers_close_and_publish_and_enter_payouts(closed_world, oscar):
    """Neither is a superuser: the billing group gives them closing, publishing and money
    entry; a read-only operator of the same console gets none of it."""
    from fleet.services import access

    groups = access.operator_groups_sync()
    officers = []
    for email in ("bea@steward.example", "ben@steward.example"):
        user = accounts.user_create(email=email, password=PASSWORD, is_staff=True)
        user.groups.add(groups[access.BILLING_OFFICERS])
        officers.append(user)
    bea, ben = officers
    assert bea.has_perms(["billing.close_period", "billing.publish_statement"])
    assert bea.has_perms(["billing.add_payout", "billing.add_ratecard", "billing.view_statement"])
    assert not bea.has_perm("billing.change_statement")
    reader = accounts.user_create(email="rob@steward.example", password=PASSWORD, is_staff=True)
    reader.groups.add(groups[access.READ_ONLY_OPERATORS])
    assert not reader.has_perm("billing.close_period")
    assert not reader.has_perm("billing.publish_statement")

    first, second = console_login(Client(), bea), console_login(Client(), ben)
    period = closed_world["period"]
    _action(first, "/admin/billing/period/", "close", [period.pk])
    assert Period.objects.get(pk=period.pk).status == Period.Status.CLOSING
    statement = Statement.objects.get()
    _action(first, "/admin/billing/statement/", "request_publish", [statement.pk])
    _action(second, "/admin/billing/statement/", "approve_publish", [statement.pk])
    published = Statement.objects.get()
    assert (published.status, published.requested_by, published.approved_by) == (
        Statement.Status.PUBLISHED,
        bea,
        ben,
    )
    _action(first, "/admin/billing/period/", "finish", [period.pk])
    assert Period.objects.get(pk=period.pk).status == Period.Status.CLOSED
    assert first.get("/admin/billing/payout/add/").status_code == 200


def test_recomputing_closing_periods_from_the_list_rewrites_their_drafts(closed_world, oscar):
    """The list's action runs every period's close in one transaction (all or none): each
    chunk of statements holds the period the run already holds, which the lock order allows."""
    client = console_login(Client(), oscar)
    period = closed_world["period"]
    _action(client, "/admin/billing/period/", "close", [period.pk])
    assert Statement.objects.count() == 1
    response = _action(client, "/admin/billing/period/", "recompute", [period.pk])
    assert response.status_code == 200
    assert "1 done." in response.content.decode()

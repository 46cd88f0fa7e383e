"""A small world for the partner API: Alice and Bob each own one GPU on their own node, each
with an incident, announced maintenance, a published statement and a payout; Carol's
partner holds keys in every state the access matrix needs. The clock is frozen at NOW."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.models import ApiScope, Owner, Partner, User
from accounts.selectors import disclosure_texts_forget
from billing.models import Payout, Statement, StatementLine
from billing.services.periods import period_for_month
from fleet.models import Gpu, Incident, IncidentCause, MaintenanceWindow, Node, Ownership
from tests.billing import scenario as s
from tests.conftest import cache_clear

UTC = dt.UTC
NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
ALL_SCOPES = list(ApiScope.values)


@dataclass
class Side:
    """One owner's things, and the text that betrays each of them in a response."""

    owner: Owner
    gpu: Gpu
    node: Node
    incident: Incident
    maintenance: MaintenanceWindow
    statement: Statement
    payout: Payout
    tokens: list[str] = field(default_factory=list)
    # Text of the owner's that no caller may ever get, not even the owner through the API.
    private: list[str] = field(default_factory=list)


@pytest.fixture(autouse=True)
def _frozen() -> Iterator[Any]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture(autouse=True)
def _throttle_counts_cleared() -> Iterator[None]:
    cache_clear()
    disclosure_texts_forget()
    yield
    cache_clear()


@pytest.fixture
def olga(db: None) -> User:
    return accounts.user_create(email="olga@steward.example", password="x" * 20, is_staff=True)


def _statement(owner: Owner, gpu: Gpu, oscar: User, olga: User, net: str) -> Statement:
    disclosure = accounts.disclosure_standard_ensure()
    period = period_for_month(year=2026, month=2)
    amount = Decimal(net)
    statement = Statement.objects.create(
        owner=owner,
        period=period,
        currency=owner.billing_currency,
        opening_balance=Decimal("0.00"),
        lines_total=amount,
        adjustments_total=Decimal("0.00"),
        payouts_total=Decimal("0.00"),
        closing_balance=amount,
        frozen_inputs={},
        content_sha256=f"{owner.legal_name[:1].lower()}" * 64,
        disclosure_version=disclosure.version,
        disclosure_sha256=disclosure.text_sha256,
        computed_at=NOW,
    )
    StatementLine.objects.create(
        statement=statement,
        position=1,
        kind=StatementLine.Kind.GPU,
        gpu=gpu,
        description="=SUM(A1)",
        starts_at=period.start,
        ends_at=period.end,
        share_bps=10_000,
        in_service_s=2_419_200,
        up_s=2_419_200,
        availability=Decimal("1.000000"),
        utilization=Decimal("0.500000"),
        gross=amount + Decimal("10.00"),
        hosting_fee=Decimal("10.00"),
        net=amount,
    )
    Statement.objects.filter(pk=statement.pk).update(
        status=Statement.Status.PUBLISHED,
        requested_by=oscar,
        requested_at=NOW,
        approved_by=olga,
        published_at=NOW,
    )
    statement.refresh_from_db()
    return statement


def _side(code: str, owner: Owner, oscar: User, olga: User, net: str) -> Side:
    f = s.fleet(code)
    g = s.gpu(f, f"SN-{code.upper()}", slot=0)
    reason = f"Bought from Private Seller {code.upper()} under contract C-{code}"
    Ownership.objects.create(
        gpu=g, owner=owner, share_bps=10_000, valid_from=s.EPOCH, reason=reason
    )
    incident = Incident.objects.create(
        gpu=g,
        title=f"Incident-{code}",
        cause=IncidentCause.POWER,
        started_at=NOW - dt.timedelta(days=2),
        ended_at=NOW - dt.timedelta(days=1),
        notes_for_owners=f"Notes-{code}",
        internal_notes=f"Internal-{code}",
    )
    maintenance = MaintenanceWindow.objects.create(
        node=f.node,
        title=f"Maintenance-{code}",
        announced_at=NOW - dt.timedelta(days=5),
        starts_at=NOW + dt.timedelta(days=1),
        ends_at=NOW + dt.timedelta(days=1, hours=2),
    )
    statement = _statement(owner, g, oscar, olga, net)
    payout = Payout.objects.create(
        owner=owner,
        currency=owner.billing_currency,
        amount=Decimal("5.00"),
        paid_on=dt.date(2026, 3, 2),
        reference=f"PAY-{code}",
        created_by=oscar,
    )
    side = Side(owner, g, f.node, incident, maintenance, statement, payout)
    side.tokens = [
        str(owner.pk),
        owner.legal_name,
        str(g.pk),
        g.serial,
        incident.title,
        maintenance.title,
        str(statement.pk),
        payout.reference,
    ]
    side.private = [reason, incident.internal_notes]
    return side


@dataclass
class World:
    a: Side
    b: Side
    partner: Partner
    keys: dict[str, str]


def key_for(
    *,
    by: User,
    scopes: list[str],
    partner: Partner | None = None,
    owner: Owner | None = None,
    days: int = 30,
    name: str = "test",
) -> str:
    _, token = accounts.api_key_create(
        name=name,
        scopes=scopes,
        expires_at=timezone.now() + dt.timedelta(days=days),
        by=by,
        partner=partner,
        owner=owner,
    )
    return token


@pytest.fixture
def world(
    alice: User, bob: User, carol: User, oscar: User, olga: User, carol_partner: Partner
) -> World:
    alice_owner = alice.memberships.get().owner
    bob_owner = bob.memberships.get().owner
    a = _side("fra1", alice_owner, oscar, olga, "338.73")
    b = _side("ams1", bob_owner, oscar, olga, "766.55")
    other = accounts.partner_create(name="Dave Accounting", contact_email="api@dave.example")
    revoked = accounts.partner_create(name="Eve Brokers", contact_email="api@eve.example")
    narrow = accounts.partner_create(name="Fay Telemetry", contact_email="api@fay.example")
    # Alice and Bob have acknowledged the disclosure, as an owner must before reading
    # earnings (tests/api/test_review_fixes.py covers owners who have not).
    for owner_user in (alice, bob):
        accounts.disclosure_acknowledge(
            user=owner_user,
            disclosure=accounts.disclosure_standard_ensure(),
            ip=None,
            user_agent="test",
        )
    accounts.partner_grant_create(
        owner=alice_owner, partner=carol_partner, scopes=ALL_SCOPES, by=alice
    )
    grant = accounts.partner_grant_create(
        owner=alice_owner, partner=revoked, scopes=ALL_SCOPES, by=alice
    )
    accounts.partner_grant_revoke(grant=grant, by=alice)
    accounts.partner_grant_create(
        owner=alice_owner, partner=narrow, scopes=[ApiScope.WEBHOOKS_MANAGE], by=alice
    )
    keys = {
        "owner_a": key_for(by=alice, scopes=ALL_SCOPES, owner=alice_owner),
        "owner_b": key_for(by=bob, scopes=ALL_SCOPES, owner=bob_owner),
        "partner_granted_a": key_for(by=carol, scopes=ALL_SCOPES, partner=carol_partner),
        "partner_ungranted": key_for(by=oscar, scopes=ALL_SCOPES, partner=other),
        "partner_revoked": key_for(by=oscar, scopes=ALL_SCOPES, partner=revoked),
        "grant_lacks_scope": key_for(by=oscar, scopes=ALL_SCOPES, partner=narrow),
        "key_lacks_scope": key_for(
            by=carol, scopes=[ApiScope.WEBHOOKS_MANAGE], partner=carol_partner
        ),
    }
    with time_machine.travel(NOW - dt.timedelta(days=40), tick=False):
        keys["expired"] = key_for(by=carol, scopes=ALL_SCOPES, partner=carol_partner, days=10)
    return World(a=a, b=b, partner=carol_partner, keys=keys)


def client_for(token: str | None) -> APIClient:
    client = APIClient()
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client

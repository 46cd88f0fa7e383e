"""Who reads what, and what a query may say: earnings behind the disclosure for personal keys
(API and the portal's key form), no ownership ``reason`` in the API, partner keys that stop
when their maker leaves the partner, and list query parameters that are refused, not
ignored."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.test import Client

from accounts import services as accounts
from accounts.models import ApiKey, ApiScope, Membership, PartnerMember, User
from fleet.models import Ownership
from fleet.services.ownership import ShareTo, ownership_transfer
from tests.api.conftest import ALL_SCOPES, NOW, World, client_for, key_for

pytestmark = pytest.mark.django_db

EARNINGS = [
    "/api/v1/statements",
    "/api/v1/statements/{statement}",
    "/api/v1/statements/{statement}/csv",
    "/api/v1/statements/{statement}/pdf",
    "/api/v1/payouts",
]
NOT_EARNINGS = ["/api/v1/owners", "/api/v1/gpus", "/api/v1/gpus/{gpu}/ownership"]


def _paths(paths: list[str], world: World) -> list[str]:
    return [p.format(statement=world.a.statement.pk, gpu=world.a.gpu.pk) for p in paths]


def _new_version(traveller: Any) -> None:
    """A new wording, published an hour later: every owner must acknowledge it again."""
    traveller.shift(dt.timedelta(hours=1))
    accounts.disclosure_publish(version="2026-04", text="Owning GPUs guarantees nothing. v2")


# ---- 1. earnings only after the disclosure, for personal keys ----------------------------------


def test_a_personal_key_reads_no_earnings_until_its_maker_acknowledges_the_version(
    world, alice, _frozen
):
    client = client_for(world.keys["owner_a"])
    for path in _paths(EARNINGS, world):
        assert client.get(path).status_code == 200, path  # 2026-01, acknowledged

    _new_version(_frozen)
    for path in _paths(EARNINGS, world):
        response = client.get(path)
        assert response.status_code == 403, path
        assert response.json()["detail"] == (
            "Acknowledge the risk disclosure, version 2026-04, in the portal (/disclosure/) "
            "before this personal key can read earnings."
        )
        assert world.a.statement.content_sha256 not in response.content.decode()
    for path in _paths(NOT_EARNINGS, world):
        assert client.get(path).status_code == 200, path  # no money: not gated

    current = accounts.disclosure_standard_ensure()
    assert current.version == "2026-04"
    accounts.disclosure_acknowledge(user=alice, disclosure=current, ip=None, user_agent="t")
    for path in _paths(EARNINGS, world):
        assert client.get(path).status_code == 200, path  # at the very next request


def test_a_member_who_never_acknowledged_gets_403_with_the_version(world, oscar):
    dan = accounts.user_create(email="dan@owner.example", password="x" * 20)
    accounts.membership_grant(user=dan, owner=world.a.owner, role=Membership.Role.VIEWER)
    token = key_for(by=dan, scopes=ALL_SCOPES, owner=world.a.owner)
    response = client_for(token).get(f"/api/v1/statements/{world.a.statement.pk}")
    assert response.status_code == 403
    assert "version 2026-01" in response.json()["detail"]
    assert response["Content-Type"] == "application/problem+json"


def test_partner_keys_are_not_asked_for_an_acknowledgement(world, _frozen):
    _new_version(_frozen)  # no one has acknowledged it
    client = client_for(world.keys["partner_granted_a"])
    for path in _paths(EARNINGS, world):
        assert client.get(path).status_code == 200, path


def _post_key(client: Client, owner: Any, scopes: list[str]) -> Any:
    return client.post(
        "/settings/api-keys/",
        {"name": "sheet", "owner": str(owner.pk), "scopes": scopes, "expires_in_days": "30"},
    )


def test_the_portal_makes_an_earnings_key_only_after_the_disclosure(
    world, alice: User, client: Client, _frozen
):
    _new_version(_frozen)
    client.force_login(alice)
    before = ApiKey.objects.count()

    response = _post_key(client, world.a.owner, [ApiScope.STATEMENTS_READ])
    assert response.status_code == 302
    assert response["Location"] == "/disclosure/?next=%2Fsettings%2Fapi-keys%2F"
    assert ApiKey.objects.count() == before

    fleet_only = _post_key(client, world.a.owner, [ApiScope.FLEET_READ])  # no earnings
    assert fleet_only.status_code == 200
    assert ApiKey.objects.count() == before + 1

    current = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=alice, disclosure=current, ip=None, user_agent="t")
    made = _post_key(client, world.a.owner, [ApiScope.STATEMENTS_READ])
    assert made.status_code == 200
    token = re.search(r"stw_live_[0-9a-f]{12}_[A-Za-z0-9_\-]{43}", made.content.decode())
    assert token is not None
    statement = client_for(token.group(0)).get(f"/api/v1/statements/{world.a.statement.pk}")
    assert statement.status_code == 200


# ---- 2. no ownership reason ------------------------------------------------------------------


def test_the_ownership_history_never_shows_the_reason(world, alice, bob, carol, oscar):
    reason = "Alice Compute Ltd sold this GPU to Bob Chen (contract C-17, EUR 21,000)."
    ownership_transfer(
        gpus=[world.a.gpu],
        from_owner=world.a.owner,
        to=[ShareTo(owner=world.b.owner, share_bps=10_000)],
        at=NOW - dt.timedelta(days=3),
        reason=reason,
        by=oscar,
    )
    accounts.partner_grant_create(
        owner=world.b.owner, partner=world.partner, scopes=[ApiScope.FLEET_READ], by=bob
    )
    path = f"/api/v1/gpus/{world.a.gpu.pk}/ownership"
    for caller in ("owner_a", "owner_b", "partner_granted_a"):
        response = client_for(world.keys[caller]).get(path)
        assert response.status_code == 200
        rows = response.json()["results"]
        assert rows and all(
            set(row) == {"id", "owner_id", "share_bps", "valid_from", "valid_to"} for row in rows
        )
        assert reason not in response.content.decode()
        assert "C-17" not in response.content.decode()
    assert Ownership.objects.filter(reason=reason).exists()  # stored, only not served


# ---- 3. strict list query parameters ---------------------------------------------------------

LISTS = {
    "/api/v1/gpus": "serial, -serial, created_at, -created_at",
    "/api/v1/owners": "legal_name, -legal_name",
    "/api/v1/incidents": "started_at, -started_at",
    "/api/v1/maintenance": "starts_at, -starts_at",
    "/api/v1/statements": "period_start, -period_start, published_at, -published_at",
    "/api/v1/payouts": "paid_on, -paid_on",
}


@pytest.mark.parametrize("path", LISTS)
def test_an_unknown_ordering_is_a_400_naming_the_allowed_ones(world, path):
    response = client_for(world.keys["partner_granted_a"]).get(f"{path}?ordering=bogus,-serial")
    assert response.status_code == 400
    bad = "bogus, -serial" if path != "/api/v1/gpus" else "bogus"
    assert response.json()["errors"] == {
        "ordering": [f"Cannot order by {bad}; order by one of {LISTS[path]}."]
    }


def test_a_list_with_one_order_refuses_any_ordering(world):
    path = f"/api/v1/gpus/{world.a.gpu.pk}/ownership?ordering=valid_from"
    response = client_for(world.keys["owner_a"]).get(path)
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "ordering: Cannot order by valid_from; this list has one order."
    )


@pytest.mark.parametrize("limit", ["abc", "-3", "0", "000", "1.5", " 2", "+2", "\u0663"])
def test_a_limit_that_is_not_a_positive_whole_number_is_a_400(world, limit):
    response = client_for(world.keys["partner_granted_a"]).get("/api/v1/gpus", {"limit": limit})
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "limit": ["Give a whole number from 1 to 500 (default 100; a larger one counts as 500)."]
    }


@pytest.mark.parametrize("limit", ["1", "001", "500", "501", "9" * 5000])
def test_a_good_or_too_large_limit_answers(world, limit):
    response = client_for(world.keys["owner_a"]).get("/api/v1/incidents", {"limit": limit})
    assert response.status_code == 200
    assert len(response.json()["results"]) == 1


def test_an_unknown_query_parameter_on_a_list_is_a_400_naming_it(world):
    client = client_for(world.keys["partner_granted_a"])
    response = client.get("/api/v1/gpus?ownr=x&held=now&zzz=1")
    assert response.status_code == 400
    takes = "cluster, cursor, format, held, lifecycle_state, limit, model, ordering, owner"
    message = f"Unknown query parameter; this list takes {takes}."
    assert response.json()["errors"] == {"ownr": [message], "zzz": [message]}
    response = client.get("/api/v1/payouts?paid_after=2026-01-01")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("paid_after: Unknown query parameter;")
    # The parameters a list does take still work.
    assert client.get("/api/v1/gpus?held=now&ordering=-serial&limit=1").status_code == 200
    assert client.get("/api/v1/statements?currency=EUR&ordering=published_at").status_code == 200
    assert client.get("/api/v1/gpus?format=json").status_code == 200  # as on a detail view


# ---- 4. a partner key stops when its maker leaves the partner --------------------------------


def test_a_partner_key_stops_when_its_maker_leaves_the_partner(world, carol, oscar):
    client = client_for(world.keys["partner_granted_a"])
    assert len(client.get("/api/v1/statements").json()["results"]) == 1
    operator_key = key_for(by=oscar, scopes=ALL_SCOPES, partner=world.partner)

    PartnerMember.objects.filter(user=carol, partner=world.partner).delete()
    for path in ("/api/v1/statements", "/api/v1/owners", "/api/v1/webhooks/endpoints"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json()["detail"] == (
            "The user who made this API key no longer belongs to its partner."
        )
    # An operator's key for the partner does not depend on membership.
    statements = client_for(operator_key).get("/api/v1/statements")
    assert statements.status_code == 200 and len(statements.json()["results"]) == 1

    accounts.partner_member_add(user=carol, partner=world.partner)  # back: works again
    assert client.get("/api/v1/statements").status_code == 200

"""Partner access and personal API keys in the portal: who may grant, create and revoke,
what each user sees, and that the API obeys a revocation at its very next request."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.models import ApiKey, ApiScope, AuditEntry, Membership, PartnerGrant
from tests.conftest import PASSWORD
from tests.portal.world import NOW

pytestmark = pytest.mark.django_db


def _api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def viewer(alice_owner):
    user = accounts.user_create(email="vic@owner.example", password=PASSWORD)
    accounts.membership_grant(user=user, owner=alice_owner, role=Membership.Role.VIEWER)
    return user


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# ---- partner access ----------------------------------------------------------------------


def test_an_admin_grants_a_partner_by_its_handle_and_it_reads_at_once(
    world, alice, alice_owner, carol, carol_partner
):
    assert carol_partner.handle == "carol-marketplace"
    _, partner_token = accounts.api_key_create(
        name="books",
        scopes=[ApiScope.FLEET_READ],
        expires_at=NOW + dt.timedelta(days=30),
        by=carol,
        partner=carol_partner,
    )
    partner = _api(partner_token)
    assert partner.get("/api/v1/gpus").json()["results"] == []

    client = _login(alice)
    empty = client.get(reverse("portal:partners"))
    assert b"No partner has been granted access" in empty.content
    response = client.post(
        reverse("portal:partners"),
        {"owner": str(alice_owner.pk), "handle": "carol-marketplace", "scopes": ["fleet:read"]},
    )
    assert response.status_code == 302
    grant = PartnerGrant.objects.get()
    assert (grant.owner, grant.partner, grant.scopes, grant.granted_by) == (
        alice_owner,
        carol_partner,
        ["fleet:read"],
        alice,
    )
    assert AuditEntry.objects.filter(action="partner_grant.create", actor=alice).count() == 1
    serials = sorted(g["serial"] for g in partner.get("/api/v1/gpus").json()["results"])
    assert serials == ["A1", "A2", "X"]

    page = client.get(reverse("portal:partners")).content.decode()
    assert "Carol Marketplace" in page and "carol-marketplace" in page and "fleet:read" in page

    # Revoked in the portal: the partner's very next request sees nothing.
    response = client.post(reverse("portal:partner-revoke", args=[grant.pk]))
    assert response.status_code == 302
    grant.refresh_from_db()
    assert (grant.revoked_at, grant.revoked_by) == (NOW, alice)
    assert AuditEntry.objects.filter(action="partner_grant.revoke", actor=alice).count() == 1
    assert partner.get("/api/v1/gpus").json()["results"] == []
    assert partner.get(f"/api/v1/gpus/{world.a1.pk}").status_code == 404
    page = client.get(reverse("portal:partners")).content.decode()
    assert "Revoked" in page and "by alice@owner.example" in page


def test_a_wrong_handle_or_no_scope_is_refused_naming_what_is_wrong(
    world, alice, alice_owner, carol_partner
):
    client = _login(alice)
    response = client.post(
        reverse("portal:partners"),
        {"owner": str(alice_owner.pk), "handle": "carol-market", "scopes": ["fleet:read"]},
    )
    assert response.status_code == 400
    assert "No partner has the handle “carol-market”" in response.content.decode()
    response = client.post(
        reverse("portal:partners"), {"owner": str(alice_owner.pk), "handle": "carol-marketplace"}
    )
    assert response.status_code == 400
    assert b"Choose at least one scope." in response.content
    response = client.post(
        reverse("portal:partners"),
        {"owner": "not-an-owner", "handle": "carol-marketplace", "scopes": ["fleet:read"]},
    )
    assert response.status_code == 400
    assert not PartnerGrant.objects.exists()


def test_a_viewer_sees_grants_read_only_and_cannot_grant_or_revoke(
    world, alice, alice_owner, viewer, carol_partner
):
    grant = accounts.partner_grant_create(
        owner=alice_owner, partner=carol_partner, scopes=["fleet:read"], by=alice
    )
    client = _login(viewer)
    page = client.get(reverse("portal:partners")).content.decode()
    assert "Carol Marketplace" in page
    assert 'id="grant-h"' not in page and 'class="danger">Revoke' not in page
    assert "Only an admin of an owner account can grant" in page
    response = client.post(
        reverse("portal:partners"),
        {"owner": str(alice_owner.pk), "handle": "carol-marketplace", "scopes": ["fleet:read"]},
    )
    assert response.status_code == 403
    response = client.post(reverse("portal:partner-revoke", args=[grant.pk]))
    assert response.status_code == 403
    assert b"Only an admin of the owner account can revoke partner access." in response.content
    grant.refresh_from_db()
    assert grant.revoked_at is None
    assert PartnerGrant.objects.count() == 1


def test_another_owners_grants_are_invisible_and_answer_404(
    world, alice, bob, alice_owner, bob_owner, carol_partner
):
    grant = accounts.partner_grant_create(
        owner=bob_owner, partner=carol_partner, scopes=["statements:read"], by=bob
    )
    client = _login(alice)
    assert "Carol" not in client.get(reverse("portal:partners")).content.decode()
    assert client.post(reverse("portal:partner-revoke", args=[grant.pk])).status_code == 404
    grant.refresh_from_db()
    assert grant.revoked_at is None
    # Nor can alice grant on bob's account by naming it.
    response = client.post(
        reverse("portal:partners"),
        {"owner": str(bob_owner.pk), "handle": "carol-marketplace", "scopes": ["fleet:read"]},
    )
    assert response.status_code == 400
    assert PartnerGrant.objects.count() == 1


# ---- personal API keys -----------------------------------------------------------------------


def test_a_key_is_shown_once_works_on_the_api_and_stops_at_once_when_revoked(
    world, alice, alice_owner
):
    accounts.disclosure_acknowledge(
        user=alice, disclosure=accounts.disclosure_standard_ensure(), ip=None, user_agent="t"
    )
    client = _login(alice)
    response = client.post(
        reverse("portal:api-keys"),
        {
            "name": "spreadsheet",
            "owner": str(alice_owner.pk),
            "scopes": ["fleet:read", "statements:read"],
            "expires_in_days": "30",
        },
    )
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    html = response.content.decode()
    key = ApiKey.objects.get()
    shown = re.search(r'<p class="token" id="token">([^<]+)</p>', html)
    assert shown is not None
    token = shown.group(1)
    assert token.startswith(f"stw_live_{key.prefix}_")
    assert key.secret_sha256 == accounts.api_key_hash(token)
    assert (key.owner, key.created_by, key.scopes, key.expires_at) == (
        alice_owner,
        alice,
        ["fleet:read", "statements:read"],
        NOW + dt.timedelta(days=30),
    )
    assert AuditEntry.objects.filter(action="api_key.create", actor=alice).count() == 1

    # The list never shows the token again, only its prefix.
    page = client.get(reverse("portal:api-keys")).content.decode()
    assert token not in page
    assert f"stw_live_{key.prefix}_…" in page and "never" in page and "spreadsheet" in page

    api = _api(token)
    serials = sorted(g["serial"] for g in api.get("/api/v1/gpus").json()["results"])
    assert serials == ["A1", "A2", "X"]
    key.refresh_from_db()
    assert key.last_used_at == NOW
    assert "2026-11-21 12:00 UTC" in client.get(reverse("portal:api-keys")).content.decode()

    assert client.post(reverse("portal:api-key-revoke", args=[key.pk])).status_code == 302
    refused = api.get("/api/v1/gpus")
    assert refused.status_code == 401
    assert refused.json()["detail"] == "This API key was revoked."
    assert AuditEntry.objects.filter(action="api_key.revoke", actor=alice).count() == 1
    assert "Revoked" in client.get(reverse("portal:api-keys")).content.decode()


def test_a_bad_key_request_names_what_is_wrong_and_writes_nothing(world, alice, alice_owner):
    client = _login(alice)
    response = client.post(
        reverse("portal:api-keys"),
        {"name": "", "owner": str(alice_owner.pk), "expires_in_days": "1000"},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "This field is required." in html
    assert "Choose at least one scope." in html
    assert "Select a valid choice. 1000 is not one of the available choices." in html
    response = client.post(
        reverse("portal:api-keys"),
        {"name": "x", "owner": str(alice_owner.pk), "scopes": ["webhooks:manage"]},
    )
    assert response.status_code == 400
    assert not ApiKey.objects.exists()


def test_owner_a_cannot_see_make_or_revoke_owner_bs_keys(world, alice, bob, alice_owner, bob_owner):
    bob_key, _ = accounts.api_key_create(
        name="bobs-key",
        scopes=["fleet:read"],
        expires_at=NOW + dt.timedelta(days=5),
        by=bob,
        owner=bob_owner,
    )
    client = _login(alice)
    assert "bobs-key" not in client.get(reverse("portal:api-keys")).content.decode()
    assert client.post(reverse("portal:api-key-revoke", args=[bob_key.pk])).status_code == 404
    bob_key.refresh_from_db()
    assert bob_key.revoked_at is None
    response = client.post(
        reverse("portal:api-keys"),
        {
            "name": "sneaky",
            "owner": str(bob_owner.pk),
            "scopes": ["fleet:read"],
            "expires_in_days": "7",
        },
    )
    assert response.status_code == 400
    assert ApiKey.objects.count() == 1


def test_an_admin_sees_and_revokes_a_members_key_a_viewer_only_their_own(
    world, alice, alice_owner, viewer
):
    mine, _ = accounts.api_key_create(
        name="alice-key",
        scopes=["fleet:read"],
        expires_at=NOW + dt.timedelta(days=5),
        by=alice,
        owner=alice_owner,
    )
    theirs, _ = accounts.api_key_create(
        name="vic-key",
        scopes=["fleet:read"],
        expires_at=NOW + dt.timedelta(days=5),
        by=viewer,
        owner=alice_owner,
    )
    as_viewer = _login(viewer)
    page = as_viewer.get(reverse("portal:api-keys")).content.decode()
    assert "vic-key" in page and "alice-key" not in page
    assert as_viewer.post(reverse("portal:api-key-revoke", args=[mine.pk])).status_code == 404

    as_admin = _login(alice)
    page = as_admin.get(reverse("portal:api-keys")).content.decode()
    assert "vic-key" in page and "alice-key" in page
    assert as_admin.post(reverse("portal:api-key-revoke", args=[theirs.pk])).status_code == 302
    theirs.refresh_from_db()
    assert theirs.revoked_at == NOW


def test_the_pages_need_a_login_and_revoking_needs_a_post(world, alice):
    anonymous = Client()
    for name in ("portal:partners", "portal:api-keys"):
        assert anonymous.get(reverse(name))["Location"].startswith("/login/")
    client = _login(alice)
    assert client.get(reverse("portal:partner-revoke", args=[1])).status_code == 405

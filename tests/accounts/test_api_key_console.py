"""Operators make partner API keys in the console: the token is shown once, works on the
API, and a revoked key stops at its next request. Read-only operators can do neither."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts import services as accounts
from accounts.models import ApiKey, AuditEntry
from fleet.services import access
from tests.accounts.two_factor import console_login
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ADD = "/admin/accounts/apikey/add/"


def _token_of(page: bytes) -> str:
    found = re.search(rb'<code class="api-token">(stw_live_[^<]+)</code>', page)
    assert found is not None, page.decode()[:2000]
    return found.group(1).decode()


def test_an_operator_makes_a_partner_key_shown_once_that_works(client, oscar, carol_partner):
    console_login(client, oscar)
    assert client.get(ADD).status_code == 200
    page = client.post(
        ADD,
        {
            "partner": carol_partner.pk,
            "name": "billing sync",
            "scopes": ["fleet:read", "statements:read"],
            "lifetime_days": "30",
        },
    )
    assert page.status_code == 200
    assert page["Cache-Control"].startswith("max-age=0")
    token = _token_of(page.content)
    key = ApiKey.objects.get()
    assert (key.partner_id, key.name, key.scopes, key.created_by_id) == (
        carol_partner.pk,
        "billing sync",
        ["fleet:read", "statements:read"],
        oscar.pk,
    )
    assert token.encode() not in client.get(f"/admin/accounts/apikey/{key.pk}/change/").content
    assert AuditEntry.objects.filter(action="api_key.create", actor=oscar).count() == 1

    api = Client()
    assert api.get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200

    client.post(
        "/admin/accounts/apikey/",
        {"action": "revoke", "_selected_action": [str(key.pk)]},
    )
    assert api.get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401


def test_bad_input_is_refused_with_the_field_named_and_nothing_made(client, oscar, carol_partner):
    console_login(client, oscar)
    page = client.post(
        ADD, {"partner": carol_partner.pk, "name": "x", "scopes": [], "lifetime_days": "400"}
    )
    assert page.status_code == 400
    assert b"This field is required." in page.content
    assert b"less than or equal to 366" in page.content
    assert not ApiKey.objects.exists()


def test_a_read_only_operator_cannot_make_or_revoke_keys(carol_partner, oscar):
    user = accounts.user_create(email="ro@steward.example", password=PASSWORD, is_staff=True)
    user.groups.add(access.operator_groups_sync()[access.READ_ONLY_OPERATORS])
    key, _token = accounts.api_key_create(
        name="k",
        scopes=["fleet:read"],
        expires_at=timezone.now() + timedelta(days=1),
        by=oscar,
        partner=carol_partner,
    )
    client = console_login(Client(), user)
    assert client.get(ADD).status_code == 403
    client.post("/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [str(key.pk)]})
    key.refresh_from_db()
    assert key.revoked_at is None


def test_an_owner_cannot_reach_the_console_keys(client, alice):
    client.force_login(alice)
    assert client.get(ADD).status_code == 302

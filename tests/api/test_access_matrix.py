"""Every endpoint × every kind of caller: owner A's key, owner B's key, a partner granted A,
a partner never granted, a partner whose grant was revoked, a partner whose grant lacks the
scope, a key that lacks the scope, an expired key, no key. Nothing of an owner reaches a
caller that may not read it — not in lists, filters, nested objects or CSV."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest
from django.http import HttpResponse
from pypdf import PdfReader

from tests.api.conftest import World, client_for


@dataclass(frozen=True)
class Endpoint:
    path: str  # with {gpu}, {owner}, {incident}, {maintenance}, {statement} of side A
    scope: str | None  # None: any scope
    detail: bool  # names one of A's objects: 404 for whoever may not read A


ENDPOINTS = [
    Endpoint("/api/v1/owners", None, False),
    Endpoint("/api/v1/owners/{owner}", None, True),
    Endpoint("/api/v1/gpus", "fleet:read", False),
    Endpoint("/api/v1/gpus?held=now&lifecycle_state=in_service", "fleet:read", False),
    Endpoint("/api/v1/gpus?owner={owner}", "fleet:read", False),
    Endpoint("/api/v1/gpus/{gpu}", "fleet:read", True),
    Endpoint("/api/v1/gpus/{gpu}/ownership", "fleet:read", True),
    Endpoint(
        "/api/v1/gpus/{gpu}/series?start=2026-03-01T00:00:00Z&end=2026-03-01T03:00:00Z",
        "telemetry:read",
        True,
    ),
    Endpoint("/api/v1/incidents", "fleet:read", False),
    Endpoint("/api/v1/incidents?gpu={gpu}", "fleet:read", True),
    Endpoint("/api/v1/incidents/{incident}", "fleet:read", True),
    Endpoint("/api/v1/maintenance", "fleet:read", False),
    Endpoint("/api/v1/maintenance?gpu={gpu}", "fleet:read", True),
    Endpoint("/api/v1/maintenance/{maintenance}", "fleet:read", True),
    Endpoint("/api/v1/statements", "statements:read", False),
    Endpoint("/api/v1/statements?owner={owner}&currency=EUR", "statements:read", False),
    Endpoint("/api/v1/statements/{statement}", "statements:read", True),
    Endpoint("/api/v1/statements/{statement}/csv", "statements:read", True),
    Endpoint("/api/v1/statements/{statement}/pdf", "statements:read", True),
    Endpoint("/api/v1/payouts", "statements:read", False),
    Endpoint("/api/v1/payouts?owner={owner}", "statements:read", False),
]

# What each caller may read: "a", "b", nothing, or the status it must get instead.
SEES = {
    "owner_a": "a",
    "partner_granted_a": "a",
    "owner_b": "b",
    "partner_ungranted": "",
    "partner_revoked": "",
    "grant_lacks_scope": "",
}
REFUSED = {"expired": 401, "anonymous": 401, "key_lacks_scope": 403}


def _url(endpoint: Endpoint, world: World) -> str:
    a = world.a
    return endpoint.path.format(
        owner=a.owner.pk,
        gpu=a.gpu.pk,
        incident=a.incident.pk,
        maintenance=a.maintenance.pk,
        statement=a.statement.pk,
    )


def _text(response: HttpResponse) -> str:
    """What a reader gets: a PDF's text (its content streams are compressed), else the body."""
    if response.get("Content-Type") == "application/pdf":
        return "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(response.content)).pages)
    return response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.path)
@pytest.mark.parametrize("caller", [*SEES, *REFUSED])
def test_no_object_leaks_to_a_caller_who_may_not_read_it(world, endpoint, caller):
    token = None if caller == "anonymous" else world.keys[caller]
    response = client_for(token).get(_url(endpoint, world))
    body = _text(response)
    for private_text in world.a.private + world.b.private:  # to no one, ever
        assert private_text not in body, f"{caller} sees {private_text!r} at {endpoint.path}"

    if caller in REFUSED and not (caller == "key_lacks_scope" and endpoint.scope is None):
        expected = REFUSED[caller]
        assert response.status_code == expected, body
        if expected != 200:
            assert response["Content-Type"] == "application/problem+json"
        for token_text in world.a.tokens + world.b.tokens:
            assert token_text not in body
        return

    sees = SEES.get(caller, "")
    if caller in ("grant_lacks_scope", "key_lacks_scope") and endpoint.scope is None:
        sees = "a"  # it may manage A's webhooks, so it may know A, and nothing more of it
    visible = {"a": world.a.tokens, "b": world.b.tokens, "": []}[sees]
    hidden = [t for t in world.a.tokens + world.b.tokens if t not in visible]
    if endpoint.detail and sees != "a":
        assert response.status_code == 404, body
        assert response["Content-Type"] == "application/problem+json"
    else:
        assert response.status_code == 200, body
    for token_text in hidden:
        assert token_text not in body, f"{caller} sees {token_text!r} at {endpoint.path}"
    # The test can fail: whoever may read A's list sees A's things in it.
    if sees == "a" and not endpoint.detail and "owner=" not in endpoint.path:
        assert any(t in body for t in world.a.tokens), body
    if sees == "b" and not endpoint.detail and "owner=" not in endpoint.path:
        assert any(t in body for t in world.b.tokens), body

"""Webhook endpoints through the partner API: a partner manages only its own, with
webhooks:manage; the secret is shown once; bad input is a 400 naming the field."""

from __future__ import annotations

import pytest
from django.test import override_settings

from accounts.models import ApiScope
from tests.api.conftest import client_for, key_for
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db
URL = "https://8.8.8.8/hooks"


def _create(client, **overrides):
    body = {"url": URL, "event_types": ["incident.opened", "statement.published"]}
    body.update(overrides)
    return client.post("/api/v1/webhooks/endpoints", body, format="json")


def test_a_partner_creates_lists_updates_rotates_and_deletes_its_endpoint(world):
    client = client_for(world.keys["partner_granted_a"])
    made = _create(client, description="books")
    assert made.status_code == 201, made.content
    body = made.json()
    secret = body["secret"]
    assert secret.startswith("whsec_")
    assert (body["url"], body["event_types"], body["enabled"], body["secret_generation"]) == (
        URL,
        ["incident.opened", "statement.published"],
        True,
        1,
    )
    listed = client.get("/api/v1/webhooks/endpoints").json()
    assert [e["id"] for e in listed["results"]] == [body["id"]]
    detail = client.get(f"/api/v1/webhooks/endpoints/{body['id']}")
    assert detail.status_code == 200
    # Shown once: never again.
    assert secret not in detail.content.decode() + str(listed)
    changed = client.patch(
        f"/api/v1/webhooks/endpoints/{body['id']}",
        {"enabled": False, "event_types": ["gpu.state_changed"]},
        format="json",
    )
    assert changed.status_code == 200
    assert (changed.json()["enabled"], changed.json()["event_types"]) == (
        False,
        ["gpu.state_changed"],
    )
    rotated = client.post(f"/api/v1/webhooks/endpoints/{body['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["secret"] not in (secret, "")
    assert rotated.json()["secret_generation"] == 2
    assert rotated.json()["previous_secret_valid_until"] == "2026-03-16T12:00:00Z"
    deliveries = client.get(f"/api/v1/webhooks/endpoints/{body['id']}/deliveries")
    assert (deliveries.status_code, deliveries.json()["results"]) == (200, [])
    assert client.delete(f"/api/v1/webhooks/endpoints/{body['id']}").status_code == 204
    assert not WebhookEndpoint.objects.exists()


@override_settings(WEBHOOK_ALLOW_LOOPBACK=False)
@pytest.mark.parametrize(
    ("body", "field", "detail"),
    [
        ({"url": "http://127.0.0.1/x"}, "url", "url: The host 127.0.0.1 is a loopback address"),
        ({"url": "http://169.254.169.254/"}, "url", "url: The host 169.254.169.254 is a link-"),
        ({"url": "ftp://8.8.8.8/x"}, "url", "url: Use an https:// URL."),
        ({"event_types": ["payout.made"]}, "event_types", 'event_types: "payout.made" is not'),
        ({"event_types": []}, "event_types", "event_types: Ensure this field has at least 1"),
        ({"url": None}, "url", "url: This field may not be null."),
        ({"colour": "red"}, "colour", "colour: Unknown field."),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(world, body, field, detail):
    response = _create(client_for(world.keys["partner_granted_a"]), **body)
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["detail"].startswith(detail), problem
    assert field in problem["errors"]
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("caller", "status", "detail"),
    [
        ("key_lacks_scope", 201, None),  # webhooks:manage only: enough
        ("owner_a", 403, "Webhook endpoints belong to partners"),
        ("expired", 401, "This API key has expired."),
        ("anonymous", 401, "Authentication credentials were not provided."),
    ],
)
def test_who_may_make_an_endpoint(world, caller, status, detail):
    token = None if caller == "anonymous" else world.keys[caller]
    response = _create(client_for(token))
    assert response.status_code == status, response.content
    if detail is not None:
        assert response.json()["detail"].startswith(detail)


def test_a_key_without_webhooks_manage_gets_403_everywhere(world, carol):
    made = webhooks.endpoint_create(
        partner=world.partner, url=URL, event_types=["incident.opened"], by=carol
    )
    token = key_for(by=carol, scopes=[ApiScope.FLEET_READ], partner=world.partner)
    client = client_for(token)
    pk = made.endpoint.pk
    for method, path in [
        ("get", "/api/v1/webhooks/endpoints"),
        ("post", "/api/v1/webhooks/endpoints"),
        ("get", f"/api/v1/webhooks/endpoints/{pk}"),
        ("patch", f"/api/v1/webhooks/endpoints/{pk}"),
        ("delete", f"/api/v1/webhooks/endpoints/{pk}"),
        ("post", f"/api/v1/webhooks/endpoints/{pk}/rotate-secret"),
        ("get", f"/api/v1/webhooks/endpoints/{pk}/deliveries"),
    ]:
        response = getattr(client, method)(path, {}, format="json")
        assert response.status_code == 403, (method, path)
        assert response.json()["detail"] == "This API key lacks the scope webhooks:manage."
    assert WebhookEndpoint.objects.get().enabled


def test_a_partner_never_sees_or_touches_another_partners_endpoints(world, carol, oscar):
    made = webhooks.endpoint_create(
        partner=world.partner, url=URL, event_types=["incident.opened"], by=carol
    )
    from fleet.services.operations import incident_open

    incident_open(
        scope=world.a.gpu,
        title="Seen",
        cause="power",
        started_at=world.a.incident.started_at,
        by=None,
    )
    webhooks.events_dispatch(limit=100)
    delivery = WebhookDelivery.objects.get()
    # Dave's partner key has every scope, but the endpoint is Carol's partner's.
    other = client_for(world.keys["partner_ungranted"])
    pk = made.endpoint.pk
    assert other.get("/api/v1/webhooks/endpoints").json()["results"] == []
    for method, path in [
        ("get", f"/api/v1/webhooks/endpoints/{pk}"),
        ("patch", f"/api/v1/webhooks/endpoints/{pk}"),
        ("delete", f"/api/v1/webhooks/endpoints/{pk}"),
        ("post", f"/api/v1/webhooks/endpoints/{pk}/rotate-secret"),
        ("get", f"/api/v1/webhooks/endpoints/{pk}/deliveries"),
        ("get", f"/api/v1/webhooks/deliveries/{delivery.pk}"),
        ("post", f"/api/v1/webhooks/deliveries/{delivery.pk}/replay"),
    ]:
        response = getattr(other, method)(path, {}, format="json")
        assert response.status_code == 404, (method, path, response.content)
        assert response["Content-Type"] == "application/problem+json"
        assert URL not in response.content.decode()
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.enabled, endpoint.secret_generation) == (True, 1)
    assert WebhookDelivery.objects.count() == 1

    # Its own partner sees the delivery and may replay it.
    own = client_for(world.keys["partner_granted_a"])
    listed = own.get(f"/api/v1/webhooks/endpoints/{pk}/deliveries").json()["results"]
    assert [d["id"] for d in listed] == [str(delivery.pk)]
    assert listed[0]["webhook_id"] == f"msg_{delivery.event_id.hex}"
    detail = own.get(f"/api/v1/webhooks/deliveries/{delivery.pk}").json()
    assert (detail["status"], detail["attempt_log"]) == ("pending", [])
    replay = own.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/replay")
    assert replay.status_code == 202, replay.content
    assert replay.json()["replay_of_id"] == str(delivery.pk)
    assert WebhookDelivery.objects.count() == 2

"""Operators manage webhooks in the console through the services: the secret is shown once,
an unsafe URL is refused on the form, replay queues a new delivery."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from tests.accounts.two_factor import console_login
from webhooks.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


def test_an_operator_registers_an_endpoint_and_sees_its_secret_once(oscar, carol_partner):
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {
            "partner": str(carol_partner.pk),
            "url": "https://8.8.8.8/hooks",
            "event_types": ["incident.opened", "ownership.changed"],
            "description": "ops",
            "enabled": "on",
        },
        follow=True,
    )
    assert response.status_code == 200
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.partner, endpoint.event_types, endpoint.created_by) == (
        carol_partner,
        ["incident.opened", "ownership.changed"],
        oscar,
    )
    assert "Secret of https://8.8.8.8/hooks (shown once" in response.content.decode()
    page = client.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/")
    assert page.status_code == 200
    assert "whsec_" not in page.content.decode()


@override_settings(WEBHOOK_ALLOW_LOOPBACK=False)
def test_the_console_refuses_an_unsafe_url(oscar, carol_partner):
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {
            "partner": str(carol_partner.pk),
            "url": "http://localhost/hooks",
            "event_types": ["incident.opened"],
        },
    )
    assert response.status_code == 200
    assert "localhost (127.0.0.1) is a loopback address" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_replay_from_the_console(oscar, hooks):
    from fleet.services.operations import incident_open
    from tests.webhooks.test_delivery import NOW
    from webhooks import services as webhooks

    incident_open(scope=hooks.gpu_a, title="PSU", cause="power", started_at=NOW, by=None)
    (delivery_id,) = webhooks.events_dispatch(limit=10).deliveries
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/webhooks/webhookdelivery/",
        {"action": "replay", "_selected_action": [str(delivery_id)]},
        follow=True,
    )
    assert "Queued 1 replays." in response.content.decode()
    replay = WebhookDelivery.objects.get(replay_of_id=delivery_id)
    assert replay.replayed_by == oscar

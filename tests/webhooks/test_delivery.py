"""Delivering to a real HTTP server on 127.0.0.1: Standard Webhooks headers and signatures
(checked by an independent implementation), rotation, retries with backoff and jitter over
three days, 410, redirects, replay."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
import time_machine

from fleet.services.operations import incident_open
from tests.webhooks.conftest import verify
from webhooks import services as webhooks
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent

pytestmark = pytest.mark.django_db
UTC = dt.UTC
NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


class Draws(random.Random):
    """Returns the given fractions in turn: the jitter draws, chosen by the test."""

    def __init__(self, *fractions: float) -> None:
        super().__init__(0)
        self.fractions = list(fractions)

    def random(self) -> float:
        return self.fractions.pop(0)


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def delivery(hooks, clock) -> WebhookDelivery:
    incident_open(
        scope=hooks.gpu_a,
        title="PSU failure",
        cause="power",
        started_at=NOW - dt.timedelta(hours=1),
        by=None,
        internal_notes="replace PSU 2",
    )
    result = webhooks.events_dispatch(limit=100)
    assert result.events == 1
    return WebhookDelivery.objects.get(pk=result.deliveries[0])


def test_a_delivery_is_signed_as_the_standard_says_and_carries_only_granted_owners(
    hooks, receiver, delivery
):
    result = webhooks.delivery_attempt(delivery_id=delivery.pk)
    assert result.status == WebhookDelivery.Status.SUCCEEDED
    (request,) = receiver.requests
    event = WebhookEvent.objects.get()
    assert request.path == "/hooks/steward"
    assert request.headers["webhook-id"] == f"msg_{event.id.hex}"
    assert request.headers["webhook-timestamp"] == str(int(NOW.timestamp()))
    assert request.headers["content-type"] == "application/json"
    assert verify(hooks.secret, request.headers, request.body) == [True]
    assert request.json() == {
        "type": "incident.opened",
        "timestamp": "2026-03-15T12:00:00Z",
        "data": {
            "incident": {
                "id": event.data["incident"]["id"],
                "title": "PSU failure",
                "cause": "power",
                "started_at": "2026-03-15T11:00:00Z",
                "ended_at": None,
                "status": "open",
                "notes_for_owners": "",
            },
            "owners": [{"owner_id": str(hooks.alice.pk)}],
        },
    }
    assert "replace PSU" not in request.body.decode()
    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert (attempt.number, attempt.status_code, attempt.response_excerpt, attempt.error) == (
        1,
        200,
        "answer 200",
        "",
    )
    assert WebhookEndpoint.objects.get().last_success_at == NOW
    # Done: a second attempt finds nothing due.
    assert webhooks.delivery_attempt(delivery_id=delivery.pk).status == ""
    assert len(receiver.requests) == 1


def test_a_tampered_body_or_another_secret_does_not_verify(hooks, receiver, delivery):
    webhooks.delivery_attempt(delivery_id=delivery.pk)
    (request,) = receiver.requests
    assert verify(hooks.secret, request.headers, request.body + b" ") == [False]
    other = webhooks.endpoint_rotate_secret(endpoint=hooks.endpoint, by=None).secret
    assert verify(other, request.headers, request.body) == [False]


def test_rotation_signs_with_both_secrets_for_the_grace_period(hooks, receiver, delivery, clock):
    rotated = webhooks.endpoint_rotate_secret(endpoint=hooks.endpoint, by=None)
    assert rotated.secret != hooks.secret
    assert rotated.endpoint.previous_secret_valid_until == NOW + dt.timedelta(hours=24)
    webhooks.delivery_attempt(delivery_id=delivery.pk)
    request = receiver.requests[-1]
    signatures = request.headers["webhook-signature"].split(" ")
    assert len(signatures) == 2
    assert verify(rotated.secret, request.headers, request.body) == [True, False]
    assert verify(hooks.secret, request.headers, request.body) == [False, True]

    clock.move_to(NOW + dt.timedelta(hours=24))
    replay = webhooks.delivery_replay(delivery=delivery, by=None)
    webhooks.delivery_attempt(delivery_id=replay.pk)
    request = receiver.requests[-1]
    assert verify(rotated.secret, request.headers, request.body) == [True]
    assert verify(hooks.secret, request.headers, request.body) == [False]


def test_the_retry_delays_are_full_jitter_below_the_schedule():
    top = Draws(*[0.999999] * 8)
    bounds = [webhooks.retry_delay(retry=n, rng=top).total_seconds() for n in range(1, 9)]
    assert bounds == [
        4.999,
        299.999,
        1799.998,
        7199.992,
        17999.982,
        35999.964,
        35999.964,
        35999.964,
    ]
    assert webhooks.retry_delay(retry=3, rng=Draws(0.0)) == dt.timedelta(0)
    assert webhooks.retry_delay(retry=3, rng=Draws(0.5)) == dt.timedelta(minutes=15)


def test_failures_are_retried_with_backoff_for_three_days_then_the_endpoint_is_disabled(
    hooks, receiver, delivery, clock
):
    receiver.answers = [500] * 100
    draws = Draws(*[0.5] * 100)
    # Each retry waits half its bound: 2.5 s, 150 s, 15 min, 1 h, 2.5 h, then 5 h.
    expected = [2.5, 150, 900, 3600, 9000] + [18000] * 20
    now = NOW
    waits = []
    while True:
        result = webhooks.delivery_attempt(delivery_id=delivery.pk, rng=draws)
        if result.status != WebhookDelivery.Status.PENDING:
            break
        assert result.status_code == 500
        assert result.next_attempt_at is not None
        waits.append((result.next_attempt_at - now).total_seconds())
        # Not due before its time.
        assert webhooks.delivery_attempt(delivery_id=delivery.pk).status == ""
        now = result.next_attempt_at
        clock.move_to(now)
    deadline = NOW + dt.timedelta(days=3)
    # The last wait is cut to end exactly three days after the first attempt.
    assert waits[:-1] == expected[: len(waits) - 1]
    assert now == deadline
    assert sum(waits) == 3 * 86_400
    assert result.status == WebhookDelivery.Status.FAILED
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_status_code, delivery.completed_at) == (
        len(waits) + 1,
        500,
        deadline,
    )
    # 5 growing waits, 13 of 5 h, and a last one cut short: 19 retries.
    assert delivery.attempts == 20
    assert len(receiver.requests) == 20
    # Every attempt carries the same webhook-id, each its own timestamp.
    assert {r.headers["webhook-id"] for r in receiver.requests} == {f"msg_{delivery.event_id.hex}"}
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.enabled, endpoint.disabled_reason, endpoint.disabled_at) == (
        False,
        "Every delivery failed for 3 days.",
        deadline,
    )


def test_an_endpoint_that_succeeded_meanwhile_stays_enabled_when_one_delivery_fails(
    hooks, receiver, delivery, clock
):
    receiver.answers = [500]
    webhooks.delivery_attempt(delivery_id=delivery.pk, rng=Draws(1.0))
    WebhookEndpoint.objects.update(last_success_at=NOW + dt.timedelta(days=1))
    receiver.answers = [503]
    clock.move_to(NOW + dt.timedelta(days=3))
    assert webhooks.delivery_attempt(delivery_id=delivery.pk).status == "failed"
    assert WebhookEndpoint.objects.get().enabled


def test_410_gone_disables_the_endpoint_and_stops_its_deliveries(hooks, receiver, delivery):
    receiver.answers = [410]
    result = webhooks.delivery_attempt(delivery_id=delivery.pk)
    assert (result.status, result.status_code) == (WebhookDelivery.Status.FAILED, 410)
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.enabled, endpoint.disabled_reason) == (
        False,
        "The endpoint answered 410 Gone.",
    )
    # A later event is not even turned into a delivery for it.
    incident_open(scope=hooks.gpu_a, title="Fan", cause="cooling", started_at=NOW, by=None)
    assert webhooks.events_dispatch(limit=100).deliveries == []
    assert len(receiver.requests) == 1


def test_a_redirect_is_not_followed_but_retried(hooks, receiver, delivery):
    receiver.answers = [302]
    result = webhooks.delivery_attempt(delivery_id=delivery.pk, rng=Draws(0.0))
    assert (result.status, result.status_code) == (WebhookDelivery.Status.PENDING, 302)
    assert len(receiver.requests) == 1


def test_a_closed_port_is_an_error_that_is_retried(hooks, receiver, delivery):
    WebhookEndpoint.objects.update(url="http://127.0.0.1:9/nothing-listens")
    result = webhooks.delivery_attempt(delivery_id=delivery.pk, rng=Draws(0.0))
    assert (result.status, result.status_code) == (WebhookDelivery.Status.PENDING, None)
    attempt = WebhookAttempt.objects.get()
    assert attempt.error.startswith("ConnectionRefusedError")


def test_replay_sends_the_event_again_with_the_same_webhook_id(hooks, receiver, delivery):
    webhooks.delivery_attempt(delivery_id=delivery.pk)
    replay = webhooks.delivery_replay(delivery=delivery, by=None)
    assert (replay.replay_of_id, replay.status, replay.event_id) == (
        delivery.pk,
        WebhookDelivery.Status.PENDING,
        delivery.event_id,
    )
    assert webhooks.delivery_attempt(delivery_id=replay.pk).status == "succeeded"
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert json.loads(first.body) == json.loads(second.body)


def test_a_grant_revoked_after_dispatch_stops_the_delivery(hooks, receiver, delivery, alice):
    from accounts import services as accounts
    from accounts.models import PartnerGrant

    accounts.partner_grant_revoke(grant=PartnerGrant.objects.get(partner=hooks.partner), by=alice)
    result = webhooks.delivery_attempt(delivery_id=delivery.pk)
    assert result.status == WebhookDelivery.Status.CANCELLED
    delivery.refresh_from_db()
    assert delivery.last_error == "No live grant with fleet:read of an owner it concerns."
    assert receiver.requests == []
    with pytest.raises(Exception, match="No live grant with fleet:read covers this event now"):
        webhooks.delivery_replay(delivery=delivery, by=None)

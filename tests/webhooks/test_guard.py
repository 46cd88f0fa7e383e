"""The SSRF guard refuses anything but public addresses, at registration and at delivery."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from webhooks import guard
from webhooks import services as webhooks
from webhooks.models import EventType, WebhookAttempt, WebhookDelivery

REFUSED = [
    ("http://127.0.0.1:8080/hook", "The host 127.0.0.1 is a loopback address"),
    ("https://10.1.2.3/hook", "The host 10.1.2.3 is a private address"),
    ("https://192.168.0.10/hook", "The host 192.168.0.10 is a private address"),
    ("http://169.254.169.254/latest/meta-data", "The host 169.254.169.254 is a link-local address"),
    ("https://[::1]/hook", "The host ::1 is a loopback address"),
    ("https://[::ffff:127.0.0.1]/hook", "The host ::ffff:127.0.0.1 is a loopback address"),
    ("https://[fe80::1]/hook", "The host fe80::1 is a link-local address"),
    ("https://[fd00::1]/hook", "The host fd00::1 is a private address"),
    ("https://0.0.0.0/hook", "The host 0.0.0.0 is an unspecified address"),
    ("https://224.0.0.1/hook", "The host 224.0.0.1 is a multicast address"),
    ("https://240.0.0.1/hook", "The host 240.0.0.1 is a reserved address"),
    ("https://100.64.0.1/hook", "The host 100.64.0.1 is an address that is not public"),
    ("https://localhost/hook", "The host localhost (127.0.0.1) is a loopback address"),
    ("ftp://203.0.113.9/hook", "Use an https:// URL."),
    ("file:///etc/passwd", "Use an https:// URL."),
    ("https://user:pw@203.0.113.9/hook", "Do not put credentials in the URL."),
    ("https:///hook", "The URL has no host."),
    ("https://no-such-host.invalid/hook", "The host no-such-host.invalid does not resolve."),
]


@override_settings(WEBHOOK_ALLOW_LOOPBACK=False)
@pytest.mark.parametrize(("url", "message"), REFUSED, ids=[u for u, _ in REFUSED])
def test_unsafe_urls_are_refused_with_the_reason(url, message):
    with pytest.raises(guard.UnsafeUrl) as caught:
        guard.url_check(url)
    assert str(caught.value).startswith(message)


@override_settings(WEBHOOK_ALLOW_HTTP=False)
def test_plain_http_is_refused_outside_development_and_tests():
    with pytest.raises(guard.UnsafeUrl, match="plain http:// is not accepted"):
        guard.url_check("http://203.0.113.9/hook")


def test_a_public_address_passes_and_is_what_the_request_connects_to():
    target = guard.url_check("https://8.8.8.8:8443/hooks?a=1")
    assert (target.scheme, target.host, target.port, target.path, target.address) == (
        "https",
        "8.8.8.8",
        8443,
        "/hooks?a=1",
        "8.8.8.8",
    )


def test_loopback_is_allowed_only_where_the_setting_says(settings):
    assert settings.WEBHOOK_ALLOW_LOOPBACK is True  # config.settings.test
    assert guard.url_check("http://127.0.0.1:9/x").address == "127.0.0.1"
    # Private and link-local stay refused even then.
    with pytest.raises(guard.UnsafeUrl, match="private"):
        guard.url_check("http://10.0.0.1/x")


@pytest.mark.django_db
@override_settings(WEBHOOK_ALLOW_LOOPBACK=False)
def test_registration_refuses_an_unsafe_url_and_writes_nothing(carol, carol_partner):
    with pytest.raises(ValidationError) as caught:
        webhooks.endpoint_create(
            partner=carol_partner,
            url="http://169.254.169.254/latest",
            event_types=[EventType.INCIDENT_OPENED],
            by=carol,
        )
    assert caught.value.message_dict == {
        "url": [
            "The host 169.254.169.254 is a link-local address; webhooks go to public "
            "addresses only."
        ]
    }
    assert not carol_partner.webhook_endpoints.exists()


@pytest.mark.django_db
def test_delivery_checks_again_and_sends_nothing_to_an_address_now_refused(
    hooks, receiver, settings
):
    from fleet.services.operations import incident_open

    incident_open(scope=hooks.gpu_a, title="PSU", cause="power", started_at=_at(), by=None)
    delivery = _dispatched_one()
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    result = webhooks.delivery_attempt(delivery_id=delivery.pk)
    assert result.status == WebhookDelivery.Status.PENDING
    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert attempt.status_code is None
    assert attempt.error.startswith("Refused: The host 127.0.0.1 is a loopback address")
    assert receiver.requests == []


def _at():
    import datetime as dt

    return dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)


def _dispatched_one() -> WebhookDelivery:
    webhooks.events_dispatch(limit=100)
    return WebhookDelivery.objects.get()

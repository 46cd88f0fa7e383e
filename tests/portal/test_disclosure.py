"""The risk disclosure page: acknowledging records who, when, from where; a new version asks
again; the return address must stay on this site."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts import services as accounts
from accounts.models import DisclosureAcknowledgement
from portal.views.common import disclosure_is_acknowledged
from tests.portal.world import NOW

pytestmark = pytest.mark.django_db


def test_nothing_can_be_acknowledged_before_a_disclosure_is_published(client, alice):
    client.force_login(alice)
    page = client.get(reverse("portal:disclosure"))
    assert page.status_code == 200
    assert b"No risk disclosure has been published yet" in page.content
    assert not disclosure_is_acknowledged(alice)


def test_acknowledging_records_time_ip_and_browser_and_returns(client, alice, now):
    disclosure = accounts.disclosure_standard_ensure()
    client.force_login(alice)
    page = client.get(reverse("portal:disclosure"), {"next": "/gpus/"})
    assert disclosure.text_sha256.encode() in page.content
    assert not disclosure_is_acknowledged(alice)

    response = client.post(
        reverse("portal:disclosure"),
        {"understood": "on", "next": "/gpus/"},
        REMOTE_ADDR="198.51.100.23",
        HTTP_USER_AGENT="Test browser 1.0",
    )

    assert response.status_code == 302
    assert response["Location"] == "/gpus/"
    row = DisclosureAcknowledgement.objects.get(user=alice)
    assert (row.disclosure_id, row.at, row.ip, row.user_agent) == (
        disclosure.pk,
        NOW,
        "198.51.100.23",
        "Test browser 1.0",
    )
    assert disclosure_is_acknowledged(alice)


def test_without_the_tick_nothing_is_recorded(client, alice):
    accounts.disclosure_standard_ensure()
    client.force_login(alice)
    response = client.post(reverse("portal:disclosure"), {"next": "/gpus/"})
    assert response.status_code == 400
    assert b"Tick the box to confirm you have read the disclosure." in response.content
    assert not DisclosureAcknowledgement.objects.exists()


def test_a_new_version_asks_again(client, alice, now):
    first = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=alice, disclosure=first, ip=None, user_agent="")
    assert disclosure_is_acknowledged(alice)
    now.shift(60)
    accounts.disclosure_publish(version="2", text="A reworded disclosure.")
    assert not disclosure_is_acknowledged(alice)
    client.force_login(alice)
    assert b"A reworded disclosure." in client.get(reverse("portal:disclosure")).content


def test_the_return_address_must_be_on_this_site(client, alice):
    accounts.disclosure_standard_ensure()
    client.force_login(alice)
    response = client.post(
        reverse("portal:disclosure"), {"understood": "on", "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("portal:home")


def test_the_page_needs_a_login(client):
    response = client.get(reverse("portal:disclosure"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("portal:login"))


@pytest.mark.urls("tests.portal.gate_urls")
def test_the_earnings_gate_sends_to_the_disclosure_and_back(client, alice):
    accounts.disclosure_standard_ensure()
    client.force_login(alice)
    response = client.get("/gated/?period=2026-11")
    assert response.status_code == 302
    assert response["Location"] == "/disclosure/?next=%2Fgated%2F%3Fperiod%3D2026-11"

    back = client.post("/disclosure/", {"understood": "on", "next": "/gated/?period=2026-11"})
    assert back["Location"] == "/gated/?period=2026-11"
    assert client.get("/gated/").content == b"earnings shown"


@pytest.mark.urls("tests.portal.gate_urls")
def test_the_earnings_gate_shows_nothing_without_a_published_disclosure(client, alice):
    client.force_login(alice)
    assert client.get("/gated/").status_code == 302

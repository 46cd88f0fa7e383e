"""A cursor is opaque but not signed: whatever a client puts in it is a clear 404 problem
("Invalid cursor", as DRF answers a cursor it cannot decode), never a 500 from the database,
on every paginated list and in every ordering. A real cursor still pages."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/v1/owners",
    "/api/v1/gpus",
    "/api/v1/gpus?ordering=-serial",
    "/api/v1/gpus?ordering=created_at",
    "/api/v1/gpus/{gpu}/ownership",
    "/api/v1/incidents",
    "/api/v1/maintenance",
    "/api/v1/statements",
    "/api/v1/statements?ordering=published_at",
    "/api/v1/payouts",
]
TAMPERED = {
    "not a position": "p=garbage",
    "no such date": "o=1&p=2026-99-99",
    "an instant without its offset": "p=2026-03-01 00:00:00",
    "a NUL byte": "r=1&p=%00",
    "a negative offset": "o=-5&p=x",
    "an offset that is not a number": "o=abc",
    "a UTC offset with seconds": "p=2026-03-01T00%3A00%3A00.5%2B00%3A00%3A30.5",
}


def _url(path: str, world, raw: str) -> str:
    cursor = base64.b64encode(raw.encode()).decode()
    return path.format(gpu=world.a.gpu.pk) + ("&" if "?" in path else "?") + f"cursor={cursor}"


# Lists ordered by text: any text without a NUL is a place in the list (the page after it).
TEXT_ORDERED = {"/api/v1/owners", "/api/v1/gpus", "/api/v1/gpus?ordering=-serial"}
TEXT_POSITIONS = {
    "p=garbage",
    "o=1&p=2026-99-99",
    "p=2026-03-01 00:00:00",
    "p=2026-03-01T00%3A00%3A00.5%2B00%3A00%3A30.5",
}


@pytest.mark.parametrize("raw", TAMPERED.values(), ids=TAMPERED.keys())
@pytest.mark.parametrize("path", LISTS)
def test_a_tampered_cursor_is_a_clear_404(world, path, raw):
    client = client_for(world.keys["partner_granted_a"])
    response = client.get(_url(path, world, raw))
    if path in TEXT_ORDERED and raw in TEXT_POSITIONS:
        assert response.status_code == 200, response.content
        return
    assert response.status_code == 404, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["detail"] == "Invalid cursor"


@pytest.mark.parametrize("path", LISTS)
def test_the_cursors_the_api_hands_out_still_page(world, path):
    client = client_for(world.keys["partner_granted_a"])
    first = client.get(path.format(gpu=world.a.gpu.pk) + ("&" if "?" in path else "?") + "limit=1")
    assert first.status_code == 200
    following = first.json()["next"]
    if following is None:
        return  # one row only: nothing to page
    assert "cursor" in parse_qs(urlsplit(following).query)
    response = client.get(following)
    assert response.status_code == 200, response.content


# Instants in ISO forms that Python's parser takes and PostgreSQL's rejects (or, for seven
# fraction digits, rounds up where Python truncates). The world's rows were all created and
# published at NOW (2026-03-15T12:00:00Z, ISO week 11, day 7): a position a moment before NOW
# pages them all, a position at NOW pages none.
UNUSUAL_INSTANTS = {
    "an ISO week date, before": ("2026-W11-7T11:59:59+00:00", True),
    "an ISO week date, at": ("2026-W11-7T12:00:00+00:00", False),
    "a decimal comma, before": ("2026-03-15T11:59:59,5+00:00", True),
    "a decimal comma, at": ("2026-03-15T12:00:00,0+00:00", False),
    "hours only, before": ("2026-03-15T11Z", True),
    "hours only, at": ("2026-03-15T12Z", False),
    "seven fraction digits, before": ("2026-03-15T11:59:59.9999999+00:00", True),
}
INSTANT_ORDERED = ["/api/v1/gpus?ordering=created_at", "/api/v1/statements?ordering=published_at"]


@pytest.mark.parametrize(("unusual", "before"), UNUSUAL_INSTANTS.values(), ids=UNUSUAL_INSTANTS)
@pytest.mark.parametrize("path", INSTANT_ORDERED)
def test_an_unusual_iso_instant_pages_from_the_instant_it_names(world, path, unusual, before):
    client = client_for(world.keys["partner_granted_a"])
    everything = client.get(path).json()["results"]
    assert everything  # the partner sees rows in both lists
    # Inside the cursor the position is form-encoded, as DRF writes it ("+" is "%2B").
    page = client.get(_url(path, world, urlencode({"p": unusual})))
    assert page.status_code == 200, page.content
    assert page.json()["results"] == (everything if before else [])

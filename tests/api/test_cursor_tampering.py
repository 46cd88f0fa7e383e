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


# Instants Python's ISO parser takes and PostgreSQL's does not: each is the instant it names.
UNUSUAL_INSTANTS = {
    "an ISO week date": ("2026-W09-1T00:00:00+00:00", "2026-02-23T00:00:00+00:00"),
    "a decimal comma": ("2026-03-01T00:00:00,5+00:00", "2026-03-01T00:00:00.5+00:00"),
    "hours only": ("2026-03-01T00Z", "2026-03-01T00:00:00+00:00"),
    "seven fraction digits": (
        "2026-03-01T00:00:00.1234567+00:00",
        "2026-03-01T00:00:00.123456+00:00",
    ),
}
INSTANT_ORDERED = ["/api/v1/gpus?ordering=created_at", "/api/v1/statements?ordering=published_at"]


@pytest.mark.parametrize(
    ("unusual", "plain"), UNUSUAL_INSTANTS.values(), ids=UNUSUAL_INSTANTS.keys()
)
@pytest.mark.parametrize("path", INSTANT_ORDERED)
def test_an_unusual_iso_instant_pages_from_the_instant_it_names(world, path, unusual, plain):
    client = client_for(world.keys["partner_granted_a"])
    # Inside the cursor the position is form-encoded, as DRF writes it ("+" is "%2B").
    unusual_page = client.get(_url(path, world, urlencode({"p": unusual})))
    plain_page = client.get(_url(path, world, urlencode({"p": plain})))
    assert unusual_page.status_code == plain_page.status_code == 200, unusual_page.content
    assert unusual_page.json()["results"] == plain_page.json()["results"]

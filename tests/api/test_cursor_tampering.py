"""A cursor is opaque but not signed: whatever a client puts in it is a clear 404 problem
("Invalid cursor", as DRF answers a cursor it cannot decode), never a 500 from the database,
on every paginated list and in every ordering. A real cursor still pages."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

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
}


def _url(path: str, world, raw: str) -> str:
    cursor = base64.b64encode(raw.encode()).decode()
    return path.format(gpu=world.a.gpu.pk) + ("&" if "?" in path else "?") + f"cursor={cursor}"


# Lists ordered by text: any text without a NUL is a place in the list (the page after it).
TEXT_ORDERED = {"/api/v1/owners", "/api/v1/gpus", "/api/v1/gpus?ordering=-serial"}
TEXT_POSITIONS = {"p=garbage", "o=1&p=2026-99-99", "p=2026-03-01 00:00:00"}


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

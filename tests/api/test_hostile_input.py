"""The partner API and its webhook configuration answer hostile input with a 4xx that says
what is wrong, never a 5xx (issue 23): NUL bytes, invalid UTF-8, huge and non-finite
numbers, deep nesting and wrong types, in query strings, paths and bodies.

Every read endpoint is tried with every hostile value in every query parameter it documents
(docs/openapi.yaml), and the webhook endpoints with hostile bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client

from tests.api.conftest import client_for
from tests.conftest import ROOT
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db

SCHEMA: dict[str, Any] = yaml.safe_load(Path(ROOT, "docs", "openapi.yaml").read_text())
# Raw, percent-encoded as a client could send them (so %FF reaches the server undecoded).
HOSTILE_QUERY = [
    "%00",
    "a%00b",
    "%FF%FE",
    "%C0%AF",
    "9" * 400,
    "-1",
    "1e309",
    "NaN",
    "Infinity",
    "2026-13-45T99:99:99Z",
    "%22%3E%3Cscript%3E",
    "x" * 5000,
    "%5B%5D",
]


def _read_paths() -> list[tuple[str, list[str]]]:
    """Each GET path of the schema without path parameters, with its query parameters."""
    out = []
    for path, item in SCHEMA["paths"].items():
        get = item.get("get")
        if get is None or "{" in path or path.endswith("/schema"):
            continue
        names = [p["name"] for p in get.get("parameters", []) if p.get("in") == "query"]
        out.append((path, names))
    return out


def _server_error(answer: Any) -> bool:
    return bool(answer.status_code >= 500)


def test_every_query_parameter_of_every_read_refuses_hostile_values_with_a_4xx(world):
    client = client_for(world.keys["partner_granted_a"])
    tried = 0
    failures = []
    for path, names in _read_paths():
        for name in [*names, "unknown_parameter"]:
            for value in HOSTILE_QUERY:
                answer = client.get(f"{path}?{name}={value}")
                tried += 1
                if _server_error(answer):
                    failures.append((path, name, value[:20], answer.status_code))
                elif answer.status_code >= 400:
                    body = answer.json()
                    assert body, (path, name, value)
    assert tried > 200
    assert failures == []


@pytest.mark.parametrize(
    "segment",
    ["%00", "%FF", "00000000-0000-0000-0000-00000000000%00", "9" * 400, "..%2F..%2Fetc"],
)
def test_hostile_path_segments_are_not_found_not_errors(world, segment):
    client = client_for(world.keys["partner_granted_a"])
    for path in ("gpus", "owners", "statements", "incidents", "maintenance"):
        answer = client.get(f"/api/v1/{path}/{segment}")
        assert answer.status_code in (400, 404), (path, segment, answer.status_code)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "body",
    [
        b'{"url": "https://8.8.8.8/h\\u0000", "event_types": ["incident.opened"]}',
        b'{"url": "https://8.8.8.8/h", "event_types": ["incident.opened\\u0000"]}',
        b'{"url": "https://8.8.8.8/h", "event_types": ["incident.opened"], "description": "\xff"}',
        b'{"url": "https://8.8.8.8/h", "event_types": ' + _deep(5000).encode() + b"}",
        b'{"url": "https://8.8.8.8/h", "event_types": "incident.opened"}',
        b'{"url": 1e999, "event_types": ["incident.opened"]}',
        b'{"url": NaN, "event_types": ["incident.opened"]}',
        b'{"url": "https://8.8.8.8/h", "event_types": ["incident.opened"], "enabled": [1]}',
        b'{"url": "' + b"a" * 100_000 + b'", "event_types": ["incident.opened"]}',
        b"[]",
        b"null",
        b'{"url": "https://8.8.8.8/h", "url": "https://8.8.4.4/h", "event_types": []}',
        b"\x00",
        b"",
    ],
    ids=lambda b: b[:40].decode("latin-1"),
)
def test_webhook_endpoint_bodies_that_cannot_be_accepted_get_a_4xx(world, body):
    client = client_for(world.keys["partner_granted_a"])
    answer = client.generic(
        "POST", "/api/v1/webhooks/endpoints", body, content_type="application/json"
    )
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.content[:300])
    assert not WebhookEndpoint.objects.exists()


def test_a_body_that_is_not_json_or_not_utf8_is_a_4xx_on_a_patch(world):
    client = client_for(world.keys["partner_granted_a"])
    made = client.post(
        "/api/v1/webhooks/endpoints",
        {"url": "https://8.8.8.8/hooks", "event_types": ["incident.opened"]},
        format="json",
    )
    assert made.status_code == 201, made.content
    path = f"/api/v1/webhooks/endpoints/{made.json()['id']}"
    for body in (b"\xff\xfe", b'{"description": "\xc0\xaf"}', b"{", _deep(10_000).encode()):
        # Bytes as they come off the wire (the stubs say str; Django sends either as is).
        answer = client.generic("PATCH", path, body, content_type="application/json")  # type: ignore[arg-type]
        assert 400 <= answer.status_code < 500, (body[:20], answer.status_code)
    assert WebhookEndpoint.objects.get().description == ""


def test_an_unauthenticated_hostile_request_is_a_401_not_an_error():
    client = Client()
    for value in HOSTILE_QUERY:
        answer = client.get(f"/api/v1/gpus?cursor={value}")
        assert answer.status_code == 401, (value, answer.status_code)
    answer = client.get("/api/v1/gpus", headers={"Authorization": "Bearer \x00\xff" + "x" * 5000})
    assert answer.status_code == 401
    assert json.loads(answer.content)

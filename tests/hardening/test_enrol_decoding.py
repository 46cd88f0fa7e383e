"""POST /api/v1/agents/enrol with hostile bodies (issue 23): the token is checked before the
request is decoded, and every refusal is a 4xx naming the problem; no token is spent by one."""

from __future__ import annotations

import json

import pytest

from telemetry.models import BootstrapToken, NodeCredential, NodeStatus
from telemetry.services.enrolment import bootstrap_token_issue
from telemetry.testing import fleet_node

ENROL = "/api/v1/agents/enrol"


@pytest.fixture
def bare_node(db):
    fake = fleet_node(gpus=1)
    NodeCredential.objects.filter(node=fake.node).delete()
    return fake.node


@pytest.fixture
def token(bare_node):
    return bootstrap_token_issue(node=bare_node, by=None)


def post(client, raw: bytes):
    return client.post(ENROL, data=raw, content_type="application/json")


def body(token: str, hostname: str, gpus: bytes = b"[]") -> bytes:
    head = json.dumps({"bootstrap_token": token, "hostname": hostname}).encode()
    return head[:-1] + b', "gpus": ' + gpus + b"}"


def nothing_enrolled() -> None:
    assert not NodeCredential.objects.exists()
    assert not NodeStatus.objects.exists()
    assert not BootstrapToken.objects.filter(used_at__isnull=False).exists()


@pytest.mark.parametrize(
    "gpus",
    [
        b'[{"name": "\xff\xfe"}]',  # invalid UTF-8
        b"[" * 5_000 + b"]" * 5_000,  # nested 5,000 deep
        b"[" * 100_000 + b"]" * 100_000,
        b'[{"serial": "\\u0000"}]',
    ],
)
def test_without_a_valid_token_no_body_gets_past_403_or_400(client, bare_node, gpus):
    response = post(client, body("stb_not-a-token", bare_node.hostname, gpus))
    assert response.status_code in (400, 403)
    if response.status_code == 400:  # only the nesting is measured before the token
        assert "deep" in response.json()["detail"]
    nothing_enrolled()


def test_an_unknown_token_is_403_whatever_else_the_body_holds(client, bare_node):
    response = post(client, body("stb_not-a-token", bare_node.hostname, b'[{"a": "\xff"}]'))
    assert response.status_code == 403
    assert response.json()["error"] == "enrolment_refused"


@pytest.mark.parametrize(
    ("raw_token", "status"),
    [
        (b'"\xff\xfe"', 400),  # not UTF-8
        (b'"\\ud800"', 422),  # half a surrogate pair
        (b'"\xc3\xa9t\xc3\xa9"', 403),  # UTF-8, not ASCII: no token is
        (b"12", 422),
        (b'"' + b"t" * 201 + b'"', 422),
    ],
)
def test_a_token_that_cannot_be_one_is_refused(client, bare_node, raw_token, status):
    raw = b'{"bootstrap_token": ' + raw_token + b', "hostname": "h"}'
    response = post(client, raw)
    assert response.status_code == status
    if status != 403:
        assert response.json()["field"] == "bootstrap_token"
    nothing_enrolled()


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"x"', b"null", b"7"])
def test_a_body_that_is_no_object_is_422(client, bare_node, raw):
    response = post(client, raw)
    assert response.status_code == 422
    assert "Expected `object`" in response.json()["detail"]
    nothing_enrolled()


@pytest.mark.parametrize(
    ("gpus", "status", "says", "field"),
    [
        (b'[{"name": "\xff\xfe"}]', 400, "not valid UTF-8", "gpus[0].name"),
        (b"[" * 40 + b"]" * 40, 400, "more than 32 deep", ""),
        (b'[{"serial": "a\\u0000"}]', 422, "NUL", "gpus[0].serial"),
        (b'[{"serial": "\\udc00"}]', 422, "half a surrogate pair", "gpus[0].serial"),
        (b'[{"name": "' + b"n" * 201 + b'"}]', 422, "at most 200", "gpus[0].name"),
        (b'[{"slot": 9223372036854775808}]', 422, "64-bit", "gpus[0].slot"),
        (b'[{"a": 1, "a": 2}]', 422, "appears twice", "gpus[0].a"),
        (b'[{"watts": NaN}]', 422, "numbers must be finite", "gpus[0].watts"),
        (b'[{"watts": 1.5, "x": [1, }]', 400, "not valid JSON", ""),
        (b'[{"watts": 1e999}]', 422, "out of range", "gpus[0].watts"),
        (b"[" + b"{}," * 256 + b"{}]", 422, "length <= 256", "gpus"),
        (b'{"a": 1}', 422, "Expected `array`", "gpus"),
        (b'["H100"]', 422, "Expected `object`", "gpus[0]"),
    ],
)
def test_with_a_valid_token_a_bad_body_is_4xx_and_the_token_is_not_spent(
    client, bare_node, token, gpus, status, says, field
):
    response = post(client, body(token, bare_node.hostname, gpus))
    assert response.status_code == status, response.content
    answer = response.json()
    assert says in answer["detail"]
    assert answer["field"] == field
    nothing_enrolled()
    good = post(client, body(token, bare_node.hostname, b'[{"name": "H100"}]'))
    assert good.status_code == 201
    assert NodeStatus.objects.get(node=bare_node).reported_gpus == [{"name": "H100"}]


def test_an_overlong_body_is_413(client, token, bare_node):
    response = post(client, body(token, bare_node.hostname, b'["' + b"x" * 300_000 + b'"]'))
    assert response.status_code == 413
    nothing_enrolled()


@pytest.mark.parametrize(
    ("raw", "says", "field"),
    [
        (b'{"bootstrap_token": "%s", "gpus": []}', "hostname is required", "hostname"),
        (b'{"bootstrap_token": "%s", "hostname": ""}', "length >= 1", "hostname"),
        (b'{"bootstrap_token": "%s", "hostname": 7}', "Expected `str`", "hostname"),
        (b'{"bootstrap_token": "%s", "hostname": "h", "agent_version": "' + b"v" * 65 + b'"}',
         "length <= 64", "agent_version"),
        (b'{"bootstrap_token": "%s", "hostname": "h", "x": "\\ud800"}', "half a surrogate", "x"),
    ],
)  # fmt: skip
def test_a_broken_limit_names_its_field(client, bare_node, token, raw, says, field):
    """docs/agent.md 5.1: 422 a limit broken, ``field`` naming it — after the token."""
    response = post(client, raw.replace(b"%s", token.encode()))
    assert response.status_code == 422, response.content
    assert says in response.json()["detail"]
    assert response.json()["field"] == field
    nothing_enrolled()


def test_a_spent_token_is_403_whatever_json_else_the_body_holds(client, bare_node, token):
    assert post(client, body(token, bare_node.hostname)).status_code == 201
    for gpus in (b'[{"w": NaN}]', b'[{"s": "\\ud800"}]', b'[{"a": 1, "a": 2}]'):
        response = post(client, body(token, bare_node.hostname, gpus))
        assert response.status_code == 403, (gpus, response.content)


@pytest.mark.parametrize(
    ("token", "status", "says"),
    [
        (b'"\xff\xfe"', 400, "not valid UTF-8"),
        (b'"\\ud800"', 422, "half a surrogate pair"),
        (b"null", 422, "got `null`"),
        (b"12", 422, "got a number"),
        (b'"' + b"t" * 201 + b'"', 422, "length <= 200"),
    ],
)
def test_a_bad_token_after_a_nan_is_answered_as_without_it(client, bare_node, token, status, says):
    """A NaN before the token sends it through the lenient reading: the same answers."""
    response = post(client, b'{"w": NaN, "bootstrap_token": ' + token + b', "hostname": "h"}')
    assert response.status_code == status, response.content
    assert says in response.json()["detail"]
    assert response.json()["field"] == "bootstrap_token"
    nothing_enrolled()

"""Hostile bodies, generated (Hypothesis), for the two endpoints an agent speaks to.

Each example starts from a body the server accepts and breaks it one way: bytes that are not
UTF-8 anywhere, nesting far past the limit, a NUL in any text or key, numbers huge or not
finite, a key twice, text over its limit, a value of the wrong type, truncated gzip, a gzip
bomb. Each must be answered with a 4xx that names the problem (and that the agent dead-letters:
400, 413, 422; an enrolment 400, 403, 413 or 422), store nothing, and log no error: no 5xx, no
traceback. Examples are bounded so the suite stays fast on CI's two cores.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.models import BootstrapToken, IngestBatch, NodeCredential, NodeStatus
from telemetry.services.enrolment import bootstrap_token_issue
from telemetry.testing import BATCHES_PATH, event, fleet_node, signed_headers, uuid7, window
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")

START = NOW.replace(second=0) - dt.timedelta(minutes=2)
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\x80", b"\xc3", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80"]  # fmt: skip
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400", b"9" * 5_000]
# Values no field of either schema takes as the type it has.
WRONG = {
    "number": [[], {}, "12", True],
    "text": [1, [], {}, 1.5, False],
    "object": [[], "x", 1],
    "array": [{}, "x", 1],
}
_DUP = "@@dup@@"  # a key no body has: replaced by a copy of another key of its object


def batch_document(node: Any) -> dict[str, Any]:
    extra = {"observed_from": 0, "observed_to": 60, "util_method": "buffer"}
    return {
        "schema": 2,
        "batch_id": str(uuid.UUID(int=7 << 76 | 2 << 62)),  # the same in every example
        "sealed_at": "2026-11-21T12:00:00.000Z",
        "agent": {"version": "0.2.0", "hostname": "n", "driver_version": "570.86.15",
                  "cuda_version": "12.8"},
        "gpus": [{"gpu_uuid": node.gpus[0].nvml_uuid, "serial": "1650", "name": "H100"}],
        "windows": [window(gpu.nvml_uuid, START, **extra) for gpu in node.gpus],
        "events": [
            event("xid", START, gpu_uuid=node.gpus[0].nvml_uuid, xid=79,
                  event_id=str(uuid.UUID(int=7 << 76 | 2 << 62 | 1)),
                  detail={"severity": "down", "name": "GPU fell off the bus", "source": "kmsg",
                          "extra": {"count": 3, "tags": ["a", "b"]}}),
        ],
    }  # fmt: skip


def places(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in the document to a value (objects and arrays included)."""
    found = [path]
    if isinstance(document, dict):
        for key, value in document.items():
            found += places(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += places(value, (*path, index))
    return found


def at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def put(document: Any, path: tuple[Any, ...], value: Any) -> None:
    at(document, path[:-1])[path[-1]] = value


def raw_json(document: Any, replacements: dict[str, bytes]) -> bytes:
    """The document as JSON, each ``"<marker>"`` string replaced by raw bytes."""
    raw = json.dumps(document).encode()
    for marker, new in replacements.items():
        assert raw.count(f'"{marker}"'.encode()) == 1
        raw = raw.replace(f'"{marker}"'.encode(), new)
    return raw


def kind_of(value: Any) -> str:
    if isinstance(value, bool | int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    return "object" if isinstance(value, dict) else "array"


# -- mutations: (document, data) -> JSON bytes that no endpoint may accept --------------------


def not_utf8_anywhere(document: Any, data: st.DataObject) -> bytes:
    raw = json.dumps(document).encode()
    where = data.draw(st.integers(0, len(raw)), label="byte")
    return raw[:where] + data.draw(st.sampled_from(BAD_UTF8), label="bad bytes") + raw[where:]


def nested_too_deep(document: Any, data: st.DataObject) -> bytes:
    containers = [p for p in places(document) if isinstance(at(document, p), dict | list)]
    path = data.draw(st.sampled_from(containers), label="where")
    levels = data.draw(st.one_of(st.integers(33, 200), st.integers(1_000, 100_000)))
    opener, closer = data.draw(
        st.sampled_from([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"a":', b"}]")])
    )
    target = at(document, path)
    marker = "@@deep@@"
    if isinstance(target, dict):
        target["deep"] = marker
    else:
        target.append(marker)
    return raw_json(document, {marker: opener * levels + b"0" + closer * levels})


def nul_in_text(document: Any, data: st.DataObject) -> bytes:
    texts = [p for p in places(document) if isinstance(at(document, p), str)]
    keys = [p for p in places(document) if p and isinstance(p[-1], str)]
    path = data.draw(st.sampled_from(texts + keys), label="where")
    in_key = isinstance(path[-1], str) and (
        path not in texts or data.draw(st.booleans(), label="in the key")
    )
    if not in_key:
        text = at(document, path)
        cut = data.draw(st.integers(0, len(text)))
        put(document, path, text[:cut] + "\x00" + text[cut:])
    else:
        parent = at(document, path[:-1])
        parent[path[-1] + "\x00"] = parent.pop(path[-1])
    return json.dumps(document).encode()


def number_out_of_range(document: Any, data: st.DataObject) -> bytes:
    numbers = [
        p for p in places(document)
        if isinstance(at(document, p), int | float) and not isinstance(at(document, p), bool)
        and p[0] in ("windows", "events", "schema")
    ]  # fmt: skip
    path = data.draw(st.sampled_from(numbers), label="where")
    huge = data.draw(st.sampled_from([*NON_FINITE, b"1e30", b"-1", str(2**64).encode()]))
    if path[0] == "events" and huge in (b"1e30", b"-1"):
        huge = str(2**63).encode()  # a detail may hold any finite number in int64
    put(document, path, "@@number@@")
    return raw_json(document, {"@@number@@": huge})


def key_twice(document: Any, data: st.DataObject) -> bytes:
    objects = [p for p in places(document) if isinstance(at(document, p), dict) and at(document, p)]
    target = at(document, data.draw(st.sampled_from(objects), label="object"))
    key = data.draw(st.sampled_from(sorted(target)), label="key")
    same = data.draw(st.booleans(), label="same value")
    copy = json.dumps(target[key] if same else None).encode()
    target[_DUP] = 0
    raw = json.dumps(document).encode()
    return raw.replace(json.dumps(_DUP).encode() + b": 0", json.dumps(key).encode() + b": " + copy)


LIMITS = {  # text fields and their limits, as a batch path
    ("windows", 0, "gpu_uuid"): 64,
    ("windows", 0, "state_reason"): 200,
    ("agent", "version"): 64,
    ("agent", "driver_version"): 64,
    ("events", 0, "kind"): 20,
    ("events", 0, "detail", "name"): 1_000,
    ("events", 0, "detail", "extra", "tags", 1): 1_000,
}


def text_too_long(document: Any, data: st.DataObject) -> bytes:
    path = data.draw(st.sampled_from(sorted(LIMITS, key=str)), label="where")
    over = data.draw(st.integers(1, 5_000), label="characters over")
    letter = data.draw(st.sampled_from(["x", "é", "\u2603", "\U0001f600"]))
    put(document, path, letter * (LIMITS[path] + over))
    return json.dumps(document).encode()


TYPED = [  # paths every value of which the schema types
    ("schema",), ("batch_id",), ("agent",), ("agent", "version"), ("windows",), ("events",),
    ("windows", 0), ("windows", 0, "gpu_uuid"), ("windows", 0, "window_start"),
    ("windows", 0, "samples_ok"), ("windows", 0, "state"), ("windows", 0, "util_gpu"),
    ("windows", 0, "util_gpu", "avg"), ("windows", 0, "energy_mj"),
    ("windows", 0, "observed_from"), ("windows", 0, "util_method"), ("events", 0),
    ("events", 0, "event_id"), ("events", 0, "kind"), ("events", 0, "occurred_at"),
    ("events", 0, "xid"), ("events", 0, "detail"),
]  # fmt: skip


def wrong_type(document: Any, data: st.DataObject) -> bytes:
    path = data.draw(st.sampled_from(TYPED), label="where")
    wrong = data.draw(st.sampled_from(WRONG[kind_of(at(document, path))]), label="value")
    put(document, path, wrong)
    return json.dumps(document).encode()


BATCH_MUTATIONS: list[Callable[[Any, st.DataObject], bytes]] = [
    not_utf8_anywhere, nested_too_deep, nul_in_text, number_out_of_range, key_twice,
    text_too_long, wrong_type,
]  # fmt: skip


# -- the ingest endpoint -------------------------------------------------------------------


@pytest.fixture
def hostile_post(client, node, caplog):
    caplog.set_level(logging.INFO)

    def send(body: bytes) -> Any:
        batch_id = str(uuid7())
        headers = signed_headers(node_id=node.id, key=node.key, body=body, batch_id=batch_id)
        content_type = headers.pop("Content-Type")
        response = client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not errors, errors[0].getMessage()
        assert not IngestBatch.objects.exists()
        return response

    return send


def refused(response: Any, statuses: tuple[int, ...] = (422,)) -> dict[str, Any]:
    assert response.status_code in statuses, (response.status_code, response.content[:300])
    answer: dict[str, Any] = response.json()
    assert answer["error"] and answer["detail"]
    return answer


def test_the_base_body_is_accepted(node, client):
    """The examples below break this body; whole, it is accepted."""
    document = batch_document(node)
    body = gzip.compress(json.dumps(document).encode())
    headers = signed_headers(node_id=node.id, key=node.key, body=body,
                             batch_id=document["batch_id"])  # fmt: skip
    content_type = headers.pop("Content-Type")
    response = client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)
    assert response.status_code == 202


@HOSTILE
@given(mutation=st.sampled_from(BATCH_MUTATIONS), data=st.data())
def test_a_broken_batch_is_422_and_stores_nothing(node, hostile_post, mutation, data):
    raw = mutation(batch_document(node), data)
    answer = refused(hostile_post(gzip.compress(raw)))
    assert answer["error"] == "invalid_batch"


@HOSTILE
@given(data=st.data())
def test_truncated_gzip_is_422(node, hostile_post, data):
    body = gzip.compress(json.dumps(batch_document(node)).encode())
    cut = data.draw(st.integers(1, len(body) - 1), label="bytes kept")
    answer = refused(hostile_post(body[:cut]))
    assert "gzip" in answer["detail"]


_BOMB_CACHE: dict[int, bytes] = {}


def _bomb(inflated: int) -> bytes:
    if inflated not in _BOMB_CACHE:
        squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        chunk = b" " * (1 << 20)
        parts = [squeeze.compress(b'{"schema": 2, "padding": "')]
        for _ in range(inflated >> 20):
            parts.append(squeeze.compress(chunk))
        _BOMB_CACHE[inflated] = b"".join([*parts, squeeze.compress(b'"}'), squeeze.flush()])
    return _BOMB_CACHE[inflated]


@settings(HOSTILE, max_examples=4)
@given(mib=st.sampled_from([17, 64]))
def test_a_gzip_bomb_is_413(hostile_post, mib):
    """16 MiB inflated at most (the default): 413 before anything is decoded."""
    answer = refused(hostile_post(_bomb(mib << 20)), (413,))
    assert answer["error"] == "too_large"


# -- the enrol endpoint --------------------------------------------------------------------

ENROL = "/api/v1/agents/enrol"


@pytest.fixture
def enrol_node(db):
    fake = fleet_node(gpus=1)
    NodeCredential.objects.filter(node=fake.node).delete()
    return fake.node


@pytest.fixture
def token(enrol_node):
    return bootstrap_token_issue(node=enrol_node, by=None)


def enrol_document(token: str, hostname: str) -> dict[str, Any]:
    return {
        "bootstrap_token": token,
        "hostname": hostname,
        "agent_version": "0.2.0",
        "gpus": [{"gpu_uuid": f"GPU-{uuid.UUID(int=1)}", "serial": "1650", "name": "H100",
                  "pci_bus_id": "00000000:18:00.0", "board_part_number": None, "slot": 0}],
    }  # fmt: skip


ENROL_LIMITS = {("hostname",): 253, ("agent_version",): 64, ("gpus", 0, "name"): 200,
                ("gpus", 0, "serial"): 200}  # fmt: skip
ENROL_TYPED = [("hostname",), ("agent_version",), ("gpus",), ("gpus", 0)]


def enrol_mutation(document: Any, data: st.DataObject) -> bytes:
    how = data.draw(st.sampled_from(["utf8", "deep", "nul", "number", "twice", "long", "type"]))
    if how == "utf8":
        return not_utf8_anywhere(document, data)
    if how == "deep":
        return nested_too_deep(document, data)
    if how == "nul":
        return nul_in_text(document, data)
    if how == "number":
        huge = data.draw(st.sampled_from([*NON_FINITE, str(2**63).encode()]))
        document["gpus"][0]["slot"] = "@@number@@"
        return raw_json(document, {"@@number@@": huge})
    if how == "twice":
        return key_twice(document, data)
    if how == "long":
        path = data.draw(st.sampled_from(sorted(ENROL_LIMITS, key=str)))
        put(document, path, "n" * (ENROL_LIMITS[path] + data.draw(st.integers(1, 2_000))))
        return json.dumps(document).encode()
    path = data.draw(st.sampled_from(ENROL_TYPED))
    put(document, path, data.draw(st.sampled_from(WRONG[kind_of(at(document, path))])))
    return json.dumps(document).encode()


@HOSTILE
@given(with_token=st.booleans(), data=st.data())
def test_a_broken_enrolment_is_4xx_and_spends_nothing(
    client, caplog, enrol_node, token, with_token, data
):
    """With the real token or without one: a 4xx, no key issued, the token still unspent."""
    caplog.set_level(logging.INFO)
    document = enrol_document(token if with_token else "stb_" + "x" * 43, enrol_node.hostname)
    raw = enrol_mutation(document, data)
    response = client.post(ENROL, data=raw, content_type="application/json")
    answer = refused(response, (400, 403, 413, 422))
    if not with_token and response.status_code == 422:  # nothing past the token was decoded
        assert "bootstrap_token" in answer["detail"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, errors[0].getMessage()
    assert not NodeCredential.objects.exists()
    assert not NodeStatus.objects.exists()
    assert BootstrapToken.objects.get().used_at is None


HEADERS = ["X-Steward-Node", "X-Steward-Timestamp", "X-Steward-Signature", "Idempotency-Key",
           "Content-Encoding"]  # fmt: skip


@HOSTILE
@given(
    name=st.sampled_from(HEADERS),
    value=st.one_of(
        st.text(st.characters(codec="latin-1"), max_size=60),
        st.integers(-(10**30), 10**30).map(str),
        st.just("9" * 400),
    ),
)
def test_a_hostile_header_is_4xx_and_stores_nothing(node, client, caplog, name, value):
    """Any value of any signed header: a 4xx (401 where it breaks the signature), never 5xx."""
    caplog.set_level(logging.INFO)
    document = batch_document(node)
    body = gzip.compress(json.dumps(document).encode())
    headers = signed_headers(node_id=node.id, key=node.key, body=body,
                             batch_id=document["batch_id"])  # fmt: skip
    if headers[name] == value:
        return
    headers[name] = value
    content_type = headers.pop("Content-Type")
    response = client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["detail"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, errors[0].getMessage()
    assert not IngestBatch.objects.exists()

"""POST /api/v1/telemetry/batches: authentication, limits, schema, idempotency."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import uuid

import psycopg
import pytest
import time_machine

from telemetry.models import IngestBatch, NodeCredential
from telemetry.services.ingest import _key_lock_id
from telemetry.testing import batch_document, event, fleet_node, signed_batch, uuid7, window
from tests.conftest import database_url
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
START = NOW.replace(second=0) - dt.timedelta(minutes=2)


def doc_for(node, **window_overrides):
    return batch_document(
        node=node, windows=[window(node.gpus[0].nvml_uuid, START, **window_overrides)]
    )


def test_a_signed_batch_is_stored_raw_and_acknowledged_202(node, post):
    document = doc_for(node)
    response = post(node, document)
    assert response.status_code == 202
    assert response.json() == {
        "batch_id": document["batch_id"],
        "status": "accepted",
        "received_at": "2026-11-21T12:00:30Z",
        "windows": 1,
        "events": 0,
    }
    stored = IngestBatch.objects.get()
    assert (stored.node_id, str(stored.batch_id), stored.status) == (
        node.id,
        document["batch_id"],
        "pending",
    )
    assert json.loads(gzip.decompress(bytes(stored.raw.body))) == document
    assert stored.window_count == 1
    assert stored.signed_at == NOW.replace(microsecond=0)


def test_the_endpoint_does_little_work(node, post, django_assert_num_queries):
    document = doc_for(node)
    # The key's generation; then one statement: the key's advisory lock and the insert.
    with django_assert_num_queries(2):
        assert post(node, document).status_code == 202


def test_a_replay_gets_the_original_answer_and_stores_nothing_new(node, post):
    document = doc_for(node)
    first = post(node, document)
    again = post(node, document)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert IngestBatch.objects.count() == 1


def test_the_same_key_with_another_body_is_422(node, post):
    document = doc_for(node)
    post(node, document)
    changed = {**document, "windows": [window(node.gpus[1].nvml_uuid, START)]}
    response = post(node, changed)
    assert response.status_code == 422
    assert response.json()["error"] == "idempotency_key_reused"
    assert IngestBatch.objects.count() == 1


def test_a_key_still_being_stored_is_409_with_retry_after(node, post, settings):
    """Another request holds the key's lock (its insert not yet committed): this one is told
    to retry, and stores nothing."""
    document = doc_for(node)
    lock = _key_lock_id(node.id, uuid.UUID(document["batch_id"]))
    with psycopg.connect(database_url(settings.DATABASES["default"])) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock])
        response = post(node, document)
    assert response.status_code == 409
    assert response.json()["error"] == "in_progress"
    assert response["Retry-After"] == "1"
    assert not IngestBatch.objects.exists()
    assert post(node, document).status_code == 202  # the lock gone, the retry is stored


def test_keys_are_per_node(node, post):
    other = fleet_node(gpus=1)
    batch_id = uuid7()
    assert post(node, batch_document(node=node, windows=[], batch_id=batch_id)).status_code == 202
    response = post(other, batch_document(node=other, windows=[], batch_id=batch_id))
    assert response.status_code == 202  # not node's answer: another node's key space
    assert IngestBatch.objects.filter(batch_id=batch_id).count() == 2


@pytest.mark.parametrize(
    ("case", "expected_error"),
    [
        ("bad_signature", "unauthorized"),
        ("expired_timestamp", "unauthorized"),
        ("future_timestamp", "unauthorized"),
        ("unknown_node", "unauthorized"),
        ("revoked_key", "unauthorized"),
        ("missing_headers", "unauthorized"),
    ],
)
def test_unauthenticated_requests_are_401_and_store_nothing(node, post, case, expected_error):
    document = doc_for(node)
    kwargs: dict[str, object] = {}
    if case == "bad_signature":
        kwargs["headers"] = {"X-Steward-Signature": "v1=" + "0" * 64}
    elif case == "expired_timestamp":
        kwargs["timestamp"] = int(NOW.timestamp()) - 301
    elif case == "future_timestamp":
        kwargs["timestamp"] = int(NOW.timestamp()) + 301
    elif case == "unknown_node":
        kwargs["headers"] = {"X-Steward-Node": str(uuid7())}
    elif case == "revoked_key":
        NodeCredential.objects.filter(node=node.node).update(revoked_at=NOW)
    elif case == "missing_headers":
        kwargs["headers"] = {"X-Steward-Timestamp": "soon"}
    response = post(node, document, **kwargs)
    assert response.status_code == 401
    assert response.json()["error"] == expected_error
    assert not IngestBatch.objects.exists()


def test_a_timestamp_300_s_away_either_way_is_accepted(node, post):
    """ "More than 300 s from its clock" in whole seconds: a clock 0.9 s into its second
    refused ``now - 300`` and took ``now + 300`` when the comparison was fractional."""
    with time_machine.travel(NOW + dt.timedelta(seconds=0.9), tick=False):
        for delta in (-300, 300):
            response = post(node, doc_for(node), timestamp=int(NOW.timestamp()) + delta)
            assert response.status_code == 202, (delta, response.content)


def test_a_signature_over_another_body_is_refused(node, post):
    document = doc_for(node)
    _, headers = signed_batch(node, doc_for(node))
    response = post(node, document, headers={"X-Steward-Signature": headers["X-Steward-Signature"]})
    assert response.status_code == 401
    assert not IngestBatch.objects.exists()


def test_a_rotated_key_stops_the_old_one(node, post):
    from telemetry.services.enrolment import node_key_rotate

    node_key_rotate(node=node.node)
    assert post(node, doc_for(node)).status_code == 401


def test_a_body_over_1_mib_is_413(node, client):
    from telemetry.testing import signed_headers

    body = b"\x1f\x8b" + bytes(2 * 1024 * 1024)
    headers = signed_headers(node_id=node.id, key=node.key, body=body, batch_id=str(uuid7()))
    response = client.post(
        "/api/v1/telemetry/batches",
        data=body,
        content_type=headers.pop("Content-Type"),
        headers=headers,
    )
    assert response.status_code == 413
    assert not IngestBatch.objects.exists()


def test_a_gzip_bomb_is_413(node, post, settings):
    settings.TELEMETRY_MAX_INFLATED_BYTES = 100_000
    document = doc_for(node)
    document["agent"]["version"] = "x" * 150
    document["padding"] = " " * 200_000
    response = post(node, document)
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not gzip at all", 422),
        (gzip.compress(b"{not json"), 422),
        (gzip.compress(b'{"schema": 2}'), 422),
    ],
)
def test_malformed_bodies_are_4xx_and_store_nothing(node, post, body, status):
    response = post(node, doc_for(node), body=body)
    assert response.status_code == status
    assert not IngestBatch.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"util_gpu": {"min": 1, "avg": 50, "max": 100.5}}, "windows[0].util_gpu.max"),
        ({"ecc_corrected": -1}, "windows[0].ecc_corrected"),
        ({"samples_ok": -3}, "windows[0].samples_ok"),
        ({"temp_c": {"min": 1, "avg": 1e400, "max": 2}}, "windows[0].temp_c.avg"),
        ({"state": "exploded"}, "windows[0].state"),
        ({"window_start": "2026-11-21T11:58:30Z"}, "windows[0].window_start"),
        ({"window_start": "2026-11-21T11:58:00"}, "windows[0].window_start"),
        # The same instant as 11:58Z, but the worker files windows by UTC day and hour.
        ({"window_start": "2026-11-21T06:58:00-05:00"}, "windows[0].window_start"),
        ({"window_start": "1999-12-31T23:59:00Z"}, "windows[0].window_start"),
    ],
)
def test_out_of_range_values_are_422_naming_field_and_window(node, post, overrides, field):
    response = post(node, doc_for(node, **overrides))
    assert response.status_code == 422
    answer = response.json()
    assert answer["error"] == "invalid_batch"
    assert answer["field"] == field
    assert answer["window"]["index"] == 0
    assert answer["window"]["gpu_uuid"] == node.gpus[0].nvml_uuid
    assert not IngestBatch.objects.exists()


@pytest.mark.parametrize(
    ("where", "value", "field", "says"),
    [
        ("event", "2026-11-21T12:58:00+01:00", "events[0].occurred_at", "must be in UTC"),
        # BC once in UTC: PostgreSQL would store it, and no Python datetime could read it back.
        ("event", "0001-01-01T00:00:00+01:00", "events[0].occurred_at", "must be in UTC"),
        ("event", "2150-01-01T00:00:00Z", "events[0].occurred_at", "outside 2000–2100"),
        ("sent_at", "0001-01-01T00:00:00Z", "sent_at", "outside 2000–2100"),
    ],
)
def test_times_outside_utc_or_any_plausible_clock_are_422(node, post, where, value, field, says):
    document = doc_for(node)
    if where == "event":
        document["events"] = [event("nvml_stall", START)]
        document["events"][0]["occurred_at"] = value
    else:
        document[where] = value
    response = post(node, document)
    assert response.status_code == 422
    answer = response.json()
    assert (answer["error"], answer["field"]) == ("invalid_batch", field)
    assert says in answer["detail"]
    assert not IngestBatch.objects.exists()


def test_agent_versions_longer_than_the_node_status_keeps_are_422(node, post):
    document = doc_for(node)
    document["agent"]["version"] = "1.2.3+" + "f" * 58  # 64 characters: kept whole
    assert post(node, document).status_code == 202
    document = doc_for(node)
    document["agent"]["driver_version"] = "5" * 65
    response = post(node, document)
    assert response.status_code == 422
    assert response.json()["field"] == "agent.driver_version"
    assert IngestBatch.objects.count() == 1


def test_nan_is_refused(node, post):
    document = doc_for(node)
    body = gzip.compress(json.dumps(document).replace('"avg": 50.0', '"avg": NaN', 1).encode())
    response = post(node, document, body=body)
    assert response.status_code == 422
    assert "not valid JSON" in response.json()["detail"]
    assert not IngestBatch.objects.exists()


@pytest.mark.parametrize(
    ("where", "field", "in_window"),
    [
        ("state_reason", "windows[0].state_reason", True),
        ("gpu_uuid", "windows[0].gpu_uuid", True),
        ("agent", "agent.version", False),
        ("event", "events[0].detail.note", False),
        ("event_key", "events[0].detail.a\x00b", False),
    ],
)
def test_a_nul_character_in_any_text_is_422_and_stores_nothing(node, post, where, field, in_window):
    """PostgreSQL stores no NUL in text or jsonb: accepted, the batch would fail as a whole."""
    document = doc_for(node)
    if where == "state_reason":
        document["windows"][0]["state_reason"] = "thermal\x00"
    elif where == "gpu_uuid":
        document["windows"][0]["gpu_uuid"] = node.gpus[0].nvml_uuid + "\x00"
    elif where == "agent":
        document["agent"]["version"] = "1.0\x00"
    else:
        detail = {"note": "a\x00b"} if where == "event" else {"a\x00b": 1}
        document["events"] = [event("xid", START, gpu_uuid=node.gpus[0].nvml_uuid, detail=detail)]
    response = post(node, document)
    assert response.status_code == 422
    answer = response.json()
    assert (answer["error"], answer["field"]) == ("invalid_batch", field)
    assert "NUL" in answer["detail"]
    if in_window:
        assert answer["window"]["index"] == 0
    assert not IngestBatch.objects.exists()


def test_an_escaped_backslash_before_u0000_is_plain_text(node, post):
    document = doc_for(node, state_reason="C:\\u0000")  # the six characters \u0000, no NUL
    assert post(node, document).status_code == 202
    assert IngestBatch.objects.count() == 1


def test_batch_id_must_match_the_idempotency_key(node, post):
    document = doc_for(node)
    response = post(node, document, headers={"Idempotency-Key": str(uuid7())})
    assert response.status_code == 401  # the key is part of what is signed


def test_gzip_is_required(node, post):
    response = post(node, doc_for(node), headers={"Content-Encoding": "identity"})
    assert response.status_code == 415


@pytest.fixture
def redis_down(settings):
    """The cache (and broker) on a port where nothing listens."""
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:9/0"}
    }


def test_a_batch_is_acknowledged_while_redis_is_down(
    node, post, redis_down, django_capture_on_commit_callbacks, caplog
):
    """The batch is committed before the kick; Redis holds nothing that matters, so its loss
    must not turn the 202 into a 500 (beat's sweep queues the batch later)."""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = post(node, doc_for(node))
    assert response.status_code == 202
    assert len(callbacks) == 1  # the kick ran, and failed quietly
    assert "processing not queued (Redis down" in caplog.text
    assert IngestBatch.objects.get().status == "pending"

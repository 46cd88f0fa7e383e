"""Delivery against a real loopback HTTP server that checks every signature."""

import email.utils
import hashlib
import hmac
import logging
import random
import re
from typing import Any

import pytest

from telemetry.agent.backoff import Backoff, parse_retry_after
from telemetry.agent.credentials import Credentials
from telemetry.agent.schema import build_body, read_body
from telemetry.agent.signing import canonical_string, sign
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader

from .conftest import START
from .helpers import head
from .server import DROP, FakeSteward


@pytest.fixture
def rig(tmp_path, clock, steward):
    spool = Spool(str(tmp_path / "spool.db"), clock=clock)
    transport = HttpTransport(steward.url, timeout_s=5)
    creds = {"value": Credentials(steward.node_id, steward.node_key)}
    uploader = Uploader(
        spool=spool,
        transport=transport,
        credentials=lambda: creds["value"],
        clock=clock,
        backoff=Backoff(base_s=1.0, cap_s=300.0, rng=random.Random(7)),
        auth_retry_s=60.0,
    )
    yield spool, uploader, steward, creds
    transport.close()
    spool.close()


def seal(spool: Spool, n: int = 1) -> list[str]:
    def build(batch_id: str, extra: list[dict[str, Any]]) -> bytes:
        return build_body(
            batch_id=batch_id, sealed_at=spool.clock.now(), agent={}, gpus=[], windows=[],
            events=extra,
        )  # fmt: skip

    return [spool.seal(build, n_windows=0, n_events=0) for _ in range(n)]


def test_signing_string_and_header_format():
    body = b"\x1f\x8bbody"
    assert canonical_string("post", "/api/v1/telemetry/batches", 1700000000, "B", body) == (
        b"POST\n/api/v1/telemetry/batches\n1700000000\nB\n"
        + hashlib.sha256(body).hexdigest().encode()
    )
    expected = hmac.new(
        b"key", canonical_string("POST", "/p", 1, "B", body), hashlib.sha256
    ).hexdigest()
    assert sign(b"key", "POST", "/p", 1, "B", body) == f"v1={expected}"


def test_accepted_batch_is_deleted_and_request_is_signed(rig, clock):
    spool, uploader, server, _ = rig
    (bid,) = seal(spool)
    body = head(spool).body
    assert uploader.pump() == clock.now()
    assert spool.count() == 0
    (req,) = server.batch_requests()
    assert req.status == 202
    h = req.headers
    assert (h["content-type"], h["content-encoding"], h["idempotency-key"]) == (
        "application/json", "gzip", bid,
    )  # fmt: skip
    assert h["x-steward-node"] == server.node_id
    assert h["x-steward-timestamp"] == str(int(START))
    assert re.fullmatch(r"v1=[0-9a-f]{64}", h["x-steward-signature"])
    assert req.body == body and req.doc["batch_id"] == bid


def test_a_bad_key_is_refused_by_the_server(rig, clock):
    spool, uploader, server, creds = rig
    seal(spool)
    creds["value"] = Credentials(server.node_id, "not-the-key")
    uploader.pump()
    assert server.batch_requests()[0].status == 401


def test_503_backs_off_and_the_retry_is_byte_identical(rig, clock):
    spool, uploader, server, _ = rig
    (bid,) = seal(spool)
    server.script.extend([503, 503])
    first = uploader.pump()
    assert first > clock.now() and spool.count() == 1 and uploader.status == "backoff"
    assert uploader.pump() == first  # not due: no request
    clock.set(first)
    second = uploader.pump()
    assert second - clock.now() <= 2.0  # second attempt: jitter up to 2 s
    clock.set(second)
    uploader.pump()
    reqs = server.batch_requests()
    assert [r.status for r in reqs] == [503, 503, 202]
    assert {r.batch_id for r in reqs} == {bid}
    assert len({r.body for r in reqs}) == 1
    assert spool.count() == 0 and uploader.backoff.attempt == 0


def test_429_retry_after_is_honoured(rig, clock):
    spool, uploader, server, _ = rig
    seal(spool)
    server.script.append((429, {"Retry-After": "120"}))
    assert uploader.pump() >= clock.now() + 120
    clock.advance(119)
    uploader.pump()
    assert len(server.batch_requests()) == 1
    clock.advance(1)
    uploader.pump()
    assert [r.status for r in server.batch_requests()] == [429, 202]


def test_retry_after_http_date():
    when = email.utils.formatdate(START + 30, usegmt=True)
    assert parse_retry_after(when, START) == 30.0
    assert parse_retry_after("7", START) == 7.0
    assert parse_retry_after("soon", START) is None


def test_full_jitter_stays_within_the_exponential_ceiling():
    backoff = Backoff(base_s=1.0, cap_s=60.0, rng=random.Random(1))
    for attempt in range(12):
        ceiling = min(60.0, 2.0**attempt)
        assert 0.05 <= backoff.next_delay() <= ceiling
    assert backoff.next_delay(retry_after_s=500.0) == 500.0


def test_401_keeps_everything_reports_re_enrolment_and_uses_a_new_key(rig, clock, caplog):
    spool, uploader, server, creds = rig
    seal(spool, 2)
    good = creds["value"]
    creds["value"] = Credentials(server.node_id, "revoked")
    caplog.set_level(logging.ERROR)
    due = uploader.pump()
    assert (uploader.status, spool.count(), due) == ("auth_failed", 2, clock.now() + 60)
    assert "re-enrol" in caplog.text
    creds["value"] = good  # e.g. steward-agent --enrol-only wrote a new key file
    clock.set(due)
    uploader.pump()
    uploader.pump()
    assert spool.count() == 0 and uploader.stats.auth_failures == 1


def test_422_goes_to_dead_letter_and_the_queue_keeps_moving(rig, clock):
    spool, uploader, server, _ = rig
    bad, good = seal(spool, 2)
    server.script.append(422)
    assert uploader.pump() == clock.now()  # straight on to the next batch
    assert uploader.pump() == clock.now()
    assert [(r.batch_id, r.status) for r in server.batch_requests()] == [(bad, 422), (good, 202)]
    assert spool.count() == 0
    assert [d[:2] for d in spool.dead_letters()] == [(bad, 422)]
    (report,) = seal(spool)
    uploader.pump()
    events = server.committed[report]["events"]
    assert [(e["kind"], e["detail"]["batch_id"]) for e in events] == [("batch_rejected", bad)]


def test_lost_answer_means_resend_with_the_same_key_and_a_200_replay(rig, clock):
    spool, uploader, server, _ = rig
    (bid,) = seal(spool)
    server.script.append(DROP)  # the server commits, the answer never arrives
    due = uploader.pump()
    assert spool.count() == 1 and uploader.status == "backoff"
    clock.set(due)
    uploader.pump()
    reqs = server.batch_requests()
    assert [(r.batch_id, r.status) for r in reqs] == [(bid, -1), (bid, 200)]
    assert reqs[0].body == reqs[1].body
    assert server.commit_order == [bid] and spool.count() == 0
    assert uploader.stats.replayed == 1


def test_409_in_progress_is_retried(rig, clock):
    spool, uploader, server, _ = rig
    seal(spool)
    server.script.append((409, {"Retry-After": "2"}))
    due = uploader.pump()
    assert due >= clock.now() + 2 and spool.count() == 1
    clock.set(due)
    uploader.pump()
    assert spool.count() == 0


def test_network_errors_back_off(tmp_path, clock):
    spool = Spool(str(tmp_path / "s.db"), clock=clock)
    server = FakeSteward(now=clock.now).start()
    url = server.url
    server.stop()  # nothing listens there any more
    uploader = Uploader(
        spool=spool,
        transport=HttpTransport(url, timeout_s=1),
        credentials=lambda: Credentials("n", "k"),
        clock=clock,
    )
    seal(spool)
    assert uploader.pump() > clock.now()
    assert uploader.status == "backoff" and spool.count() == 1
    with spool._lock:
        attempts, error = spool._db.execute("SELECT attempts, last_error FROM batch").fetchone()
    assert attempts == 1 and "ConnectionRefused" in error
    spool.close()


def test_batches_are_delivered_oldest_first(rig, clock):
    spool, uploader, server, _ = rig
    ids = seal(spool, 5)
    for _ in range(5):
        uploader.pump()
    assert server.commit_order == ids
    assert [read_body(b"" or server.batch_requests()[i].body)["batch_id"] for i in range(5)] == ids

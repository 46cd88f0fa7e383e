"""The real agent's uploader against the real endpoint (issue 23): a batch the server can
never accept is answered with a status the agent dead-letters, and the batches behind it in
the spool are delivered. Before, a body nested 100,000 deep got a 500, which the agent
retries: that node's queue stalled for good."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import time
from typing import Any

import pytest
from django.utils import timezone

from telemetry.agent.clock import RealClock
from telemetry.agent.credentials import Credentials
from telemetry.agent.schema import build_body
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader
from telemetry.models import IngestBatch
from telemetry.testing import fleet_node, minute, window

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = {"version": "0.2.0", "hostname": "n", "driver_version": None, "cuda_version": None}


def windows_at(node: Any, at: dt.datetime) -> list[dict[str, Any]]:
    return [
        window(gpu.nvml_uuid, at, observed_from=0, observed_to=60, util_method="buffer")
        for gpu in node.gpus
    ]


def poison(batch_id: str, payload: bytes) -> bytes:
    """A schema-2 body whose one event's detail is ``payload``, as raw JSON bytes."""
    document = {
        "schema": 2,
        "batch_id": batch_id,
        "sealed_at": "2026-11-26T00:00:00.000Z",
        "agent": AGENT,
        "gpus": [],
        "windows": [],
        "events": [
            {
                "event_id": "019abf00-0000-7000-8000-000000000000",
                "gpu_uuid": None,
                "kind": "nvml_stall",
                "occurred_at": "2026-11-26T00:00:00.000Z",
                "xid": None,
                "detail": {"x": "PLACEHOLDER"},
            }
        ],
    }
    return gzip.compress(json.dumps(document).encode().replace(b'"PLACEHOLDER"', payload))


def test_poison_batches_are_dead_lettered_and_the_next_ones_delivered(tmp_path, live_server):
    node = fleet_node(gpus=2, placed_from=timezone.now() - dt.timedelta(days=1))
    clock = RealClock()
    spool = Spool(str(tmp_path / "spool.db"), clock=clock)
    start = minute(timezone.now()) - dt.timedelta(minutes=10)
    payloads = [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in msgspec, before
        b'"\xff\xfe"',  # UnicodeDecodeError, before
        b'{"deep": ' + b"[" * 1_200 + b'"\\u0000"' + b"]" * 1_200 + b"}",  # the recursive NUL walk
    ]
    poisoned = []
    for payload in payloads:

        def seal_poison(batch_id: str, _extra: list[dict[str, Any]], p: bytes = payload) -> bytes:
            return poison(batch_id, p)

        poisoned.append(spool.seal(seal_poison, n_windows=0, n_events=1))
    good = []
    for k in range(2):
        at = start + dt.timedelta(minutes=k)
        docs = windows_at(node, at)

        def build(batch_id: str, extra: list[dict[str, Any]], docs=docs) -> bytes:
            return build_body(
                batch_id=batch_id, sealed_at=clock.now(), agent=AGENT, gpus=[], windows=docs,
                events=extra,
            )  # fmt: skip

        good.append(spool.seal(build, n_windows=len(docs), n_events=0))
    transport = HttpTransport(live_server.url, timeout_s=30)
    creds = Credentials(str(node.id), node.key)
    uploader = Uploader(spool=spool, transport=transport, credentials=lambda: creds, clock=clock)
    try:
        deadline = time.monotonic() + 60
        while spool.count() and time.monotonic() < deadline:
            due = uploader.pump()
            assert uploader.status != "backoff", spool.dead_letters()  # nothing to retry
            time.sleep(max(0.0, min(0.05, due - clock.now())))
    finally:
        transport.close()
    assert spool.count() == 0
    dead = spool.dead_letters()
    assert [batch_id for batch_id, _, _ in dead] == poisoned
    assert [status for _, status, _ in dead] == [422, 422, 422]
    details = [json.loads(response)["detail"] for _, _, response in dead]
    assert "more than 32 deep" in details[0]
    assert "not valid UTF-8" in details[1]
    assert "more than 32 deep" in details[2]
    assert uploader.stats.statuses == {422: 3, 202: 2}
    stored = IngestBatch.objects.order_by("received_at")
    assert [str(b.batch_id) for b in stored] == good
    assert sum(b.window_count for b in stored) == 4
    spool.close()

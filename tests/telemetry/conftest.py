"""Telemetry fixtures: a node with placed GPUs and its key, and a signed poster."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
import time_machine
from django.test import Client

from telemetry.testing import BATCHES_PATH, FakeNode, fleet_node, signed_batch, signed_headers

NOW = dt.datetime(2026, 11, 21, 12, 0, 30, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _windows_emptied(request: pytest.FixtureRequest) -> Any:
    """Transactional tests end with a flush, which skips unmanaged tables such as the
    partitioned windows table, the derived-work marks and the hours' tallies: empty them
    around them so no test sees another's windows."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        yield
        return
    request.getfixturevalue("transactional_db")
    windows_truncate()
    yield
    # A pass the test's batches queued may still run on the session's worker: a TRUNCATE
    # beside it deadlocks (it locks the windows and marks in another order), so wait for it.
    from tests.conftest import worker_drain

    worker_drain()
    windows_truncate()


def windows_truncate() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_window, telemetry_derivedwork, telemetry_hourtally")


@pytest.fixture
def now() -> Any:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def node(db: None) -> FakeNode:
    return fleet_node(gpus=2, placed_from=NOW - dt.timedelta(days=30))


@pytest.fixture
def post(client: Client) -> Callable[..., Any]:
    def _post(node: FakeNode, document: dict[str, Any], **kwargs: Any) -> Any:
        body, headers = signed_batch(node, document, timestamp=kwargs.pop("timestamp", None))
        if "body" in kwargs:  # a hand-made body, signed as an agent would sign it
            body = kwargs.pop("body")
            headers = signed_headers(
                node_id=node.id,
                key=node.key,
                body=body,
                batch_id=document["batch_id"],
                timestamp=int(headers["X-Steward-Timestamp"]),
            )
        headers.update(kwargs.pop("headers", {}))
        content_type = headers.pop("Content-Type")
        return client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)

    return _post


@pytest.fixture
def no_queued_passes(monkeypatch: pytest.MonkeyPatch) -> Any:
    """These tests stage races between the window path and passes by hand: keep the session's
    Celery worker (if one runs) out of them. Batches stored and chunks committed here queue no
    task, and any pass queued or in flight from an earlier test is waited for (its kick flag
    gone, the pass lock free)."""
    import time

    from django.core.cache import cache
    from django.db import connection

    from telemetry.dispatch import DERIVED_KICK_KEY
    from telemetry.services import ingest, processing
    from telemetry.services.derived import PASS_LOCK
    from tests.conftest import worker_drain

    monkeypatch.setattr(processing, "derived_kick", lambda: None)
    monkeypatch.setattr(ingest, "processing_kick", lambda: None)
    worker_drain()  # tasks queued by earlier tests, which would process this test's batches
    # The test database runs without autovacuum: after the suite's earlier tests the passes'
    # statements plan against no statistics (seconds per pass with a few hundred windows).
    # Production's autovacuum keeps them; here they are gathered once before staging passes.
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE telemetry_window, telemetry_derivedwork, telemetry_hourlyrollup, "
            "telemetry_telemetryevent"
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [PASS_LOCK])
            (free,) = cursor.fetchone()
            if free:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [PASS_LOCK])
        if free and cache.get(DERIVED_KICK_KEY) is None:
            return
        time.sleep(0.1)
    raise AssertionError("a derived pass queued by an earlier test never finished")


def undecodable_batch_stored(node: FakeNode) -> Any:
    """A pending batch whose body is not gzip, stored as the endpoint stores a batch (no
    endpoint would accept it: a worker meeting one sets it aside)."""
    from telemetry.models import IngestBatch
    from telemetry.testing import batches_stored, uuid7

    (batch,) = batches_stored([(
        IngestBatch(node=node.node, batch_id=uuid7(), body_sha256="0" * 64, signed_at=NOW,
                    received_at=NOW, answer={}),
        b"not gzip",
    )])  # fmt: skip
    return batch

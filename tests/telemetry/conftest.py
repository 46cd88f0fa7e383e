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
    partitioned windows table and the derived-work marks: empty them around them so no test
    sees another's windows."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        yield
        return
    request.getfixturevalue("transactional_db")
    windows_truncate()
    yield
    windows_truncate()


def windows_truncate() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_window, telemetry_derivedwork")


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

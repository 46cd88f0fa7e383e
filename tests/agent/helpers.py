from __future__ import annotations

import sqlite3
from typing import Any

from telemetry.agent.schema import read_body
from telemetry.agent.spool import Spool, SpooledBatch


def spooled_docs(path: str) -> list[dict[str, Any]]:
    """Every batch still in a spool file, oldest first, decoded."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT body FROM batch ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [read_body(body) for (body,) in rows]


def windows_of(docs: list[dict[str, Any]], gpu_uuid: str | None = None) -> list[dict[str, Any]]:
    return [w for d in docs for w in d["windows"] if gpu_uuid in (None, w["gpu_uuid"])]


def events_of(docs: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    return [e for d in docs for e in d["events"] if kind in (None, e["kind"])]


def head(spool: Spool) -> SpooledBatch:
    """The oldest deliverable batch, which the test knows exists."""
    batch = spool.oldest()
    assert batch is not None
    return batch

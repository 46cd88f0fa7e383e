"""The batch body (schema v2, docs/agent.md 5.3): gzip(JSON), frozen when the batch is sealed.

A batch's bytes never change after sealing, so every retry under the same Idempotency-Key
carries the same body and the same body hash.  That is why the body has ``sealed_at`` (when
it was built) rather than a send time: the send time travels in X-Steward-Timestamp.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

from .timefmt import rfc3339_ms

SCHEMA_VERSION = 2  # v1 lacked observed_from, observed_to and util_method


def build_body(
    *,
    batch_id: str,
    sealed_at: float,
    agent: dict[str, Any],
    gpus: list[dict[str, Any]],
    windows: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> bytes:
    doc = {
        "schema": SCHEMA_VERSION,
        "batch_id": batch_id,
        "sealed_at": rfc3339_ms(sealed_at),
        "agent": agent,
        "gpus": gpus,
        "windows": windows,
        "events": events,
    }
    raw = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    # mtime=0: the same document always compresses to the same bytes.
    return gzip.compress(raw, compresslevel=6, mtime=0)


def read_body(body: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(body))
    return doc

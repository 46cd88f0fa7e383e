"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

An endpoint's secret is ``whsec_`` + base64 of 32 bytes; the signing key is those bytes. The
bytes are never stored: ``HMAC-SHA256(STEWARD_WEBHOOK_KEY_SECRET,
"webhook:{endpoint_id}:{generation}")``, so the database alone reveals no secret, and a rotation
is a new generation. A request carries

    webhook-id: msg_…            webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")> [v1,<…> …]

one signature per secret valid at that moment (two during a rotation's grace period).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from datetime import datetime

from django.conf import settings

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


def signing_key(*, endpoint_id: uuid.UUID, generation: int) -> bytes:
    server = settings.STEWARD_WEBHOOK_KEY_SECRET.encode()
    return hmac.new(server, f"webhook:{endpoint_id}:{generation}".encode(), hashlib.sha256).digest()


def secret_for(*, endpoint_id: uuid.UUID, generation: int) -> str:
    """The ``whsec_…`` secret a partner verifies with (shown once, when made or rotated)."""
    key = signing_key(endpoint_id=endpoint_id, generation=generation)
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def sign(*, key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def generations_signing(
    *, generation: int, previous_valid_until: datetime | None, at: datetime
) -> list[int]:
    """The secret generations that sign at ``at``: the current one, and the previous one while
    its grace period lasts."""
    if previous_valid_until is not None and at < previous_valid_until and generation > 1:
        return [generation, generation - 1]
    return [generation]


def headers_for(
    *,
    endpoint_id: uuid.UUID,
    generations: list[int],
    message_id: str,
    timestamp: int,
    body: bytes,
) -> dict[str, str]:
    signatures = [
        sign(
            key=signing_key(endpoint_id=endpoint_id, generation=g),
            message_id=message_id,
            timestamp=timestamp,
            body=body,
        )
        for g in generations
    ]
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signatures),
    }

"""Node keys and request signatures (the server's half of the wire contract).

A node key is never stored: ``HMAC-SHA256(STEWARD_NODE_KEY_SECRET, "{node_id}:{generation}")``
as base64url without padding. The agent uses the key's ASCII bytes as its HMAC key and signs

    "{METHOD}\\n{PATH}\\n{timestamp}\\n{batch_id}\\n{sha256 hex of the body as sent}"

sending ``X-Steward-Signature: v1=<hex>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

from django.conf import settings

SIGNATURE_VERSION = "v1"


def node_key_derive(*, node_id: uuid.UUID, generation: int) -> str:
    secret = settings.STEWARD_NODE_KEY_SECRET.encode()
    mac = hmac.new(secret, f"{node_id}:{generation}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def node_key_sha256(node_key: str) -> str:
    return hashlib.sha256(node_key.encode("ascii")).hexdigest()


def canonical_request(
    *, method: str, path: str, timestamp: int, batch_id: str, body_sha256: str
) -> bytes:
    return f"{method.upper()}\n{path}\n{timestamp}\n{batch_id}\n{body_sha256}".encode()


def request_signature(
    *, node_key: str, method: str, path: str, timestamp: int, batch_id: str, body_sha256: str
) -> str:
    message = canonical_request(
        method=method, path=path, timestamp=timestamp, batch_id=batch_id, body_sha256=body_sha256
    )
    mac = hmac.new(node_key.encode("ascii"), message, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={mac}"


def signature_matches(expected: str, given: str) -> bool:
    """Constant-time comparison, so the answer time says nothing about the right signature."""
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii", "replace"))

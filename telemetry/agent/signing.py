"""Request signing with the node key (HMAC-SHA256), shared by the agent and its tests.

The signed string binds the request line, the time, the idempotency key and the exact bytes
sent, so a captured request cannot be replayed later, against another path, or with another
body under the same key:

    "{METHOD}\\n{PATH}\\n{timestamp}\\n{batch_id}\\n{sha256 hex of the body as sent}"
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_VERSION = "v1"


def canonical_string(method: str, path: str, timestamp: int, batch_id: str, body: bytes) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    return f"{method.upper()}\n{path}\n{timestamp}\n{batch_id}\n{digest}".encode()


def sign(key: bytes, method: str, path: str, timestamp: int, batch_id: str, body: bytes) -> str:
    """The X-Steward-Signature header value: ``v1=<hex hmac>``."""
    mac = hmac.new(key, canonical_string(method, path, timestamp, batch_id, body), hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify(
    key: bytes,
    signature: str,
    *,
    method: str,
    path: str,
    timestamp: int,
    batch_id: str,
    body: bytes,
    now: float,
    tolerance_s: int = 300,
) -> bool:
    """What the server checks: fresh timestamp and a constant-time signature match."""
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(key, method, path, timestamp, batch_id, body)
    return hmac.compare_digest(expected, signature)

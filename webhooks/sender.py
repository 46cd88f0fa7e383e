"""One webhook request with the standard library: to the checked address, no redirects,
connect and read timeouts, and only the first bytes of the answer read."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from webhooks.guard import Target

EXCERPT_CHARS = 1000


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    duration_ms: int
    response_excerpt: str
    error: str


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address, whatever the host name resolves to now."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(target.host, target.port, timeout=timeout, context=self._tls)
        self._address = target.address

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def post(
    *, target: Target, body: bytes, headers: dict[str, str], timeout_s: float, max_bytes: int
) -> Outcome:
    """POSTs ``body``; any status is an answer (3xx included: redirects are not followed)."""
    cls = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    started = time.monotonic()
    connection = cls(target, timeout_s)
    try:
        connection.request(
            "POST",
            target.path,
            body=body,
            headers={
                **headers,
                "Content-Type": "application/json",
                "User-Agent": "Steward-Webhooks/1",
            },
        )
        response = connection.getresponse()
        content = response.read(max_bytes)
        excerpt = content.decode("utf-8", "replace")[:EXCERPT_CHARS]
        return Outcome(response.status, _ms(started), excerpt, "")
    except (OSError, http.client.HTTPException) as error:
        name = type(error).__name__
        return Outcome(None, _ms(started), "", f"{name}: {error}"[:500])
    finally:
        connection.close()


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)

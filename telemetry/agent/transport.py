"""A minimal HTTP(S) client on http.client, with one kept-alive connection."""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
from dataclasses import dataclass


class TransportError(Exception):
    """The request did not produce an HTTP answer (connect, TLS, timeout, reset)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


class HttpTransport:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0, ca_file: str | None = None):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL must be http(s)://host[:port][/prefix], not {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self._ssl = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        self._conn: http.client.HTTPConnection | None = None

    def path(self, api_path: str) -> str:
        """The full request path (what is signed) for an API path such as /api/v1/..."""
        return f"{self.prefix}{api_path}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout_s, context=self._ssl
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.timeout_s
                )
        return self._conn

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        conn = self._connection()
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        if resp.getheader("connection", "").lower() == "close":
            self.close()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

"""A tiny real Steward stand-in on 127.0.0.1 for agent tests and the benchmark.

It verifies the HMAC signature exactly as the server must, dedupes on the idempotency key
(202 first time, 200 for a replay), and can be scripted to answer anything else.
"""

from __future__ import annotations

import collections
import gzip
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from telemetry.agent.signing import verify

ENROL = "/api/v1/agents/enrol"
BATCHES = "/api/v1/telemetry/batches"
DROP = "drop"  # scripted action: commit, then close the connection without an answer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    doc: dict[str, Any] | None = None
    at: float = 0.0  # the server clock when it answered

    @property
    def batch_id(self) -> str:
        return self.headers.get("idempotency-key", "")


@dataclass
class FakeSteward:
    node_key: str = "test-node-key-0123456789abcdefghijklmnopqrstuv"
    node_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    tokens: set[str] = field(default_factory=lambda: {"boot-token-1"})
    now: Any = time.time  # the clock the timestamp check uses
    verify_signatures: bool = True
    script: collections.deque[Any] = field(default_factory=collections.deque)
    default: Any = None  # callable(request) -> status | (status, headers) | None
    received: list[Received] = field(default_factory=list)
    committed: dict[str, dict[str, Any]] = field(default_factory=dict)
    commit_order: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeSteward:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    # -- what the tests look at ------------------------------------------------------------

    def batch_requests(self) -> list[Received]:
        return [r for r in self.received if r.path == BATCHES]

    def windows(self) -> list[dict[str, Any]]:
        return [w for bid in self.commit_order for w in self.committed[bid]["windows"]]

    def events(self) -> list[dict[str, Any]]:
        return [e for bid in self.commit_order for e in self.committed[bid]["events"]]

    # -- request handling --------------------------------------------------------------------

    def handle(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if path == ENROL:
            return self._enrol(body)
        if path != BATCHES:
            return 404, {}, b"not found"
        bid = headers.get("idempotency-key", "")
        if self.verify_signatures and not self._signed(path, headers, body):
            return 401, {}, b'{"detail":"bad signature"}'
        action = self.script.popleft() if self.script else None
        if action is None and self.default is not None:
            action = self.default(headers)
        if action == DROP:
            self._commit(bid, body)
            return -1, {}, b""
        if action is not None:
            status, extra = action if isinstance(action, tuple) else (action, {})
            return status, extra, json.dumps({"status": status}).encode()
        if bid in self.committed:
            return 200, {}, b'{"status":"replay"}'
        self._commit(bid, body)
        return 202, {}, b'{"status":"accepted"}'

    def _signed(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        try:
            timestamp = int(headers.get("x-steward-timestamp", ""))
        except ValueError:
            return False
        return headers.get("x-steward-node") == self.node_id and verify(
            self.node_key.encode(),
            headers.get("x-steward-signature", ""),
            method="POST",
            path=path,
            timestamp=timestamp,
            batch_id=headers.get("idempotency-key", ""),
            body=body,
            now=self.now(),
        )

    def _commit(self, bid: str, body: bytes) -> None:
        if bid not in self.committed:
            self.committed[bid] = json.loads(gzip.decompress(body))
            self.commit_order.append(bid)

    def _enrol(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        data = json.loads(body)
        token = data.get("bootstrap_token")
        if token not in self.tokens:
            return 403, {}, b'{"detail":"unknown or used token"}'
        self.tokens.discard(token)
        answer = {"node_id": self.node_id, "node_key": self.node_key}
        return 201, {"Content-Type": "application/json"}, json.dumps(answer).encode()


def _handler(server: FakeSteward) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per answer: headers and body in separate segments would meet the
        # client's delayed ACK and cost 40 ms a request.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server.lock:
                status, extra, payload = server.handle(self.path, headers, body)
                doc = None
                if self.path == BATCHES and body[:2] == b"\x1f\x8b":
                    doc = json.loads(gzip.decompress(body))
                server.received.append(
                    Received(self.path, headers, body, status, doc, server.now())
                )
            if status < 0:
                self.close_connection = True
                return
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler

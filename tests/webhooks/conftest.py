"""A real HTTP receiver on 127.0.0.1 (in a thread) and a small world: Alice owns SN-A, Bob
owns SN-B, Carol's partner is granted Alice (fleet and statements) and has one endpoint."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from accounts import services as accounts
from accounts.models import ApiScope, Owner, Partner, User
from fleet.models import Gpu
from tests.billing import scenario as s
from webhooks import services as webhooks
from webhooks.models import EventType, WebhookEndpoint


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    # Status codes to answer, in order; when empty, 200.
    answers: list[int] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            state.requests.append(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            status = state.answers.pop(0) if state.answers else 200
            reply = f"answer {status}".encode()
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
            state.arrived.set()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/steward"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def verify(secret: str, headers: dict[str, str], body: bytes) -> list[bool]:
    """The receiver's side of Standard Webhooks, written from the spec: one bool per
    signature in the header."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    results = []
    for part in headers["webhook-signature"].split(" "):
        version, _, signature = part.partition(",")
        results.append(version == "v1" and hmac.compare_digest(signature, expected))
    return results


@dataclass
class Hooks:
    alice: Owner
    bob: Owner
    partner: Partner
    gpu_a: Gpu
    gpu_b: Gpu
    endpoint: WebhookEndpoint
    secret: str
    fleet: s.Fleet


@pytest.fixture
def hooks(alice: User, bob: User, carol: User, carol_partner: Partner, receiver) -> Hooks:
    alice_owner = alice.memberships.get().owner
    bob_owner = bob.memberships.get().owner
    f = s.fleet()
    gpu_a, gpu_b = s.gpu(f, "SN-A", slot=0), s.gpu(f, "SN-B", slot=1)
    s.own(gpu_a, alice_owner, 10_000, s.EPOCH)
    s.own(gpu_b, bob_owner, 10_000, s.EPOCH)
    accounts.partner_grant_create(
        owner=alice_owner,
        partner=carol_partner,
        scopes=[ApiScope.FLEET_READ, ApiScope.STATEMENTS_READ],
        by=alice,
    )
    made = webhooks.endpoint_create(
        partner=carol_partner, url=receiver.url, event_types=list(EventType.values), by=carol
    )
    return Hooks(alice_owner, bob_owner, carol_partner, gpu_a, gpu_b, made.endpoint, made.secret, f)

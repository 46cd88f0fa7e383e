"""Delivers spooled batches, oldest first, signed, until the server answers 2xx.

Outcomes by status:
  2xx                         delete the batch; next one at once
  401, 403                    keep everything; report "re-enrol" and retry slowly (key file may
                              be replaced by `steward-agent --enrol-only` meanwhile)
  404, 405                    keep; treat as a misconfigured URL, retry with backoff
  408, 409, 425, 429, 5xx     keep; exponential backoff with full jitter, honouring Retry-After
  network errors              same as 5xx
  other 4xx (400, 413, 422)   the batch itself is bad: dead-letter it, move on
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .backoff import Backoff, parse_retry_after
from .clock import Clock
from .credentials import Credentials
from .signing import sign
from .spool import Spool
from .transport import HttpTransport, TransportError

log = logging.getLogger(__name__)

BATCHES_PATH = "/api/v1/telemetry/batches"
_RETRY_STATUSES = frozenset({404, 405, 408, 409, 425, 429})


@dataclass(slots=True)
class UploaderStats:
    delivered: int = 0
    replayed: int = 0  # 200: the server had committed it already
    dead_lettered: int = 0
    retries: int = 0
    auth_failures: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class Uploader:
    def __init__(
        self,
        *,
        spool: Spool,
        transport: HttpTransport,
        credentials: Callable[[], Credentials | None],
        clock: Clock,
        backoff: Backoff | None = None,
        auth_retry_s: float = 60.0,
        idle_poll_s: float = 5.0,
    ) -> None:
        self.spool = spool
        self.transport = transport
        self.credentials = credentials
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.auth_retry_s = auth_retry_s
        self.idle_poll_s = idle_poll_s
        self.next_attempt_at = 0.0
        self.status = "idle"
        self.stats = UploaderStats()
        self.wake = threading.Event()

    def pump(self) -> float:
        """Try to deliver one batch if due; returns the clock time to call again."""
        now = self.clock.now()
        if now < self.next_attempt_at:
            return self.next_attempt_at
        creds = self.credentials()
        if creds is None:
            self.status = "not_enrolled"
            return now + self.idle_poll_s
        batch = self.spool.oldest()
        if batch is None:
            self.status = "idle"
            return now + self.idle_poll_s
        path = self.transport.path(BATCHES_PATH)
        timestamp = int(now)
        headers = {
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Idempotency-Key": batch.batch_id,
            "X-Steward-Node": creds.node_id,
            "X-Steward-Timestamp": str(timestamp),
            "X-Steward-Signature": sign(
                creds.key_bytes, "POST", path, timestamp, batch.batch_id, batch.body
            ),
        }
        try:
            resp = self.transport.post(path, batch.body, headers)
        except TransportError as exc:
            self.spool.record_attempt(batch.batch_id, None, str(exc)[:500])
            return self._retry(now, None, f"network: {exc}")
        status = resp.status
        self.stats.statuses[status] = self.stats.statuses.get(status, 0) + 1
        text = resp.body[:2000].decode("utf-8", "replace")
        if 200 <= status < 300:
            self.spool.delete(batch.batch_id)
            self.stats.delivered += 1
            self.stats.replayed += status == 200
            self.backoff.reset()
            self.status = "ok"
            return now
        self.spool.record_attempt(batch.batch_id, status, text[:500])
        if status in (401, 403):
            self.stats.auth_failures += 1
            if self.status != "auth_failed":
                log.error(
                    "server refused the node key (HTTP %d): re-enrol this node with a new "
                    "bootstrap token (steward-agent --enrol-only --bootstrap-token ...); "
                    "batches stay spooled meanwhile",
                    status,
                )
            self.status = "auth_failed"
            self.next_attempt_at = now + self.auth_retry_s
            return self.next_attempt_at
        if status in _RETRY_STATUSES or status >= 500 or status < 200 or 300 <= status < 400:
            retry_after = parse_retry_after(resp.headers.get("retry-after"), now)
            return self._retry(now, retry_after, f"HTTP {status}")
        log.error("server rejected batch %s (HTTP %d): %s", batch.batch_id, status, text[:200])
        self.spool.dead_letter(batch, status, text)
        self.stats.dead_lettered += 1
        self.status = "ok"
        return now

    def _retry(self, now: float, retry_after: float | None, why: str) -> float:
        delay = self.backoff.next_delay(retry_after)
        self.stats.retries += 1
        self.status = "backoff"
        self.next_attempt_at = now + delay
        log.info("delivery deferred %.1fs (%s)", delay, why)
        return self.next_attempt_at

    def run(self, stop: threading.Event) -> None:
        """Deliver until `stop` is set; `wake` cuts an idle wait short (a new batch)."""
        while not stop.is_set():
            self.wake.clear()
            due = self.pump()
            delay = due - self.clock.now()
            if delay > 0:
                self.clock.wait(self.wake, delay)

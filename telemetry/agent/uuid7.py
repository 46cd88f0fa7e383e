"""UUID version 7 (RFC 9562 section 5.7); Python 3.12's uuid module has no uuid7.

Layout: 48-bit unix milliseconds, version 7, 12-bit `rand_a`, variant 0b10, 62-bit `rand_b`.
`rand_a` is used as a counter within one millisecond (RFC 9562 6.2, method 1) so ids made by
one process sort in creation order, which the spool and the server both rely on.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid

_COUNTER_MAX = 0xFFF


class Uuid7Factory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._counter = 0

    def new(self, unix_ms: int | None = None) -> uuid.UUID:
        """A new UUIDv7; `unix_ms` dates it explicitly (an event dated when it happened)."""
        if unix_ms is not None:
            # Explicit dates (often in the past) need no ordering against the counter.
            return _build(unix_ms, secrets.randbits(12))
        with self._lock:
            ms = time.time_ns() // 1_000_000
            if ms <= self._last_ms:
                ms = self._last_ms
                self._counter += 1
                if self._counter > _COUNTER_MAX:
                    # Counter exhausted: borrow the next millisecond (RFC 9562 6.2).
                    ms += 1
                    self._counter = secrets.randbits(11)
            else:
                # Random start with headroom below the top so the counter rarely overflows.
                self._counter = secrets.randbits(11)
            self._last_ms = ms
            return _build(ms, self._counter)


def _build(unix_ms: int, rand_a: int) -> uuid.UUID:
    if not 0 <= unix_ms < (1 << 48):
        raise ValueError("unix_ms out of range for UUIDv7")
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand_a & _COUNTER_MAX) << 64
    value |= 0b10 << 62
    value |= secrets.randbits(62)
    return uuid.UUID(int=value)


def uuid7_unix_ms(value: uuid.UUID) -> int:
    """The millisecond timestamp embedded in a UUIDv7."""
    if value.version != 7:
        raise ValueError("not a UUIDv7")
    return value.int >> 80


_default = Uuid7Factory()


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    return _default.new(unix_ms)

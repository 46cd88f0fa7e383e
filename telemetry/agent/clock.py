"""Time for the agent, behind a protocol so tests and demos can control it.

Wall time (`now`) dates samples, windows and events; it is UTC unix seconds.  Sleeping and
waiting go through the clock too, so a fake clock makes an hour pass in milliseconds.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current UTC time as unix seconds."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` of this clock's time pass."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wait for `event` at most `timeout` seconds of this clock's time; True if it was set."""
        ...


class RealClock:
    """The system clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout))


class FakeClock:
    """Manually advanced time; sleeping advances it instantly (single-threaded simulations)."""

    def __init__(self, start: float) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not run backwards")
        with self._lock:
            self._now += seconds

    def set(self, when: float) -> None:
        with self._lock:
            if when < self._now:
                raise ValueError("time does not run backwards")
            self._now = when

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        self.sleep(timeout)
        return event.is_set()


class ScaledClock:
    """Time that runs `speed` times faster than real time from `start` (for demos).

    It stands still at `start` until `resume()`, so setting up a simulated node (which can
    take a noticeable fraction of a real second) does not eat into its first minute.
    """

    def __init__(self, start: float, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self._start = float(start)
        self._speed = float(speed)
        self._mono0: float | None = None

    def resume(self) -> None:
        if self._mono0 is None:
            self._mono0 = time.monotonic()

    def now(self) -> float:
        if self._mono0 is None:
            return self._start
        return self._start + (time.monotonic() - self._mono0) * self._speed

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self._speed)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout) / self._speed)


class CatchUpClock:
    """A simulated node's time: starts in the past and runs as fast as the work allows, then,
    once `go_live()` is called (the caller has caught up with real time), follows the
    system clock. The demo uses it to backfill weeks of history before going live.

    While catching up, sleeping and waiting advance it at once, never past real time.
    """

    def __init__(self, start: float) -> None:
        if start > time.time():
            raise ValueError("a backfill starts in the past")
        self._now = float(start)
        self._live = False
        self._lock = threading.Lock()

    @property
    def live(self) -> bool:
        return self._live

    def skip_to(self, when: float) -> None:
        """Moves forward to `when` (never back, never past real time) before anything runs."""
        with self._lock:
            self._now = max(self._now, min(float(when), time.time()))

    def go_live(self) -> None:
        self._live = True

    def now(self) -> float:
        if self._live:
            return time.time()
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        if self._live:
            RealClock().sleep(seconds)
        elif seconds > 0:
            with self._lock:
                self._now = min(self._now + seconds, max(self._now, time.time()))

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if self._live:
            return event.wait(max(0.0, timeout))
        if event.is_set():
            return True
        self.sleep(timeout)
        return event.is_set()

"""Workloads for a fake GPU: when its engines are busy, to the microsecond.

A load answers one question, `busy_us(a, b)`: how many microseconds of ``[a, b)`` (unix
microseconds) the GPU was busy. The fake driver's samples, its instantaneous utilization, its
power and its energy counter all derive from it, and a test compares what the agent reports
with the same function over a window (the ground truth).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Protocol

US = 1_000_000


class Load(Protocol):
    def busy_us(self, a: int, b: int) -> int:
        """Busy microseconds in ``[a, b)``."""
        ...


@dataclass(frozen=True, slots=True)
class PeriodicLoad:
    """Busy for `busy_s`, idle for `idle_s`, again and again; a cycle begins at `offset_s`
    (unix seconds, any cycle start: the pattern extends both ways)."""

    busy_s: float
    idle_s: float
    offset_s: float = 0.0

    def _busy_before(self, x: int) -> int:
        busy, cycle = round(self.busy_s * US), round((self.busy_s + self.idle_s) * US)
        n, r = divmod(x - round(self.offset_s * US), cycle)
        return n * busy + min(r, busy)

    def busy_us(self, a: int, b: int) -> int:
        return self._busy_before(b) - self._busy_before(a) if b > a else 0


@dataclass(slots=True)
class RandomLoad:
    """Alternating busy and idle stretches, each lasting a seeded-random `low_s`..`high_s`,
    from `start_s` (unix seconds) on, idle before it. Stretches are drawn as far as they are
    asked for, so `start_s` should be near the node's start."""

    seed: int
    start_s: float
    low_s: float = 0.1
    high_s: float = 3.0
    _edges: list[int] = field(default_factory=list)  # stretch starts; even index: busy
    _busy: list[int] = field(default_factory=list)  # busy microseconds before each edge
    _rng: random.Random | None = None

    def _extend(self, until: int) -> None:
        if self._rng is None:
            self._rng = random.Random(self.seed)
            self._edges, self._busy = [round(self.start_s * US)], [0]
        while self._edges[-1] <= until:
            length = round(self._rng.uniform(self.low_s, self.high_s) * US)
            busy = length if len(self._edges) % 2 == 1 else 0  # the stretch just closed
            self._busy.append(self._busy[-1] + busy)
            self._edges.append(self._edges[-1] + length)

    def _busy_before(self, x: int) -> int:
        self._extend(x)
        if x <= self._edges[0]:
            return 0
        i = bisect.bisect_right(self._edges, x) - 1  # x lies in stretch i
        done = self._busy[i]
        return done + (x - self._edges[i] if i % 2 == 0 else 0)

    def busy_us(self, a: int, b: int) -> int:
        return self._busy_before(b) - self._busy_before(a) if b > a else 0


def parse_load(spec: object, start_s: float) -> Load:
    """A scenario's ``load``: ``{busy = 0.5, idle = 0.5, offset = 0}`` or
    ``{random = [0.1, 3.0], seed = 1}`` (seconds); a random load begins at `start_s`."""
    if not isinstance(spec, dict):
        raise ValueError(f"a load is a table, not {spec!r}")
    if "random" in spec:
        low, high = spec["random"]
        return RandomLoad(
            seed=int(spec.get("seed", 1)),
            low_s=float(low),
            high_s=float(high),
            start_s=start_s,
        )
    if "busy" in spec and "idle" in spec:
        return PeriodicLoad(float(spec["busy"]), float(spec["idle"]), float(spec.get("offset", 0)))
    raise ValueError(f"unknown load {spec!r}; use busy/idle or random")

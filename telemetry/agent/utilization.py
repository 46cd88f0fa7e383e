"""Utilization from the driver's sample buffer, as pieces of time each with one value.

The driver keeps, per GPU, a ring of utilization samples (one per sampling period: 200 ms on
the H100 and H200); ``nvmlDeviceGetSamples(handle, type, last_seen_us)`` returns those newer
than `last_seen_us`. A sample stamped ``t`` covers ``(t_prev, t]``, ``t_prev`` being the
previous sample's stamp; the first sample of a stream, or the first after a gap, covers
``(t - period, t]``. A gap (consecutive stamps more than 1.5 periods apart: overrun, driver
reload, a lost GPU) becomes a piece covered by the instantaneous read taken at the poll that
found it. Windows then take the time-weighted mean of the pieces over their observed span.

Everything is in whole microseconds of the driver's clock (CPU time), so means are exact.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

GAP_PERIODS = 1.5  # consecutive stamps further apart than this many periods: a gap


@dataclass(frozen=True, slots=True)
class Piece:
    start_us: int
    end_us: int  # the piece covers (start_us, end_us]
    value: int  # percent
    buffered: bool  # False: a gap, covered by an instantaneous read


Samples = list[tuple[int, int]]  # (timestamp µs, percent), as the driver gave them


@dataclass(frozen=True, slots=True)
class Plan:
    """What a poll's samples will cover, worked out before the poll is over."""

    spans: list[tuple[int, int, int | None]]  # (start, end, value); None: a gap
    period_us: int | None
    covered_to_us: int | None
    last_seen_us: int

    @property
    def has_gap(self) -> bool:
        return any(value is None for _, _, value in self.spans)


@dataclass(slots=True)
class SampleStream:
    """One sampling type (GPU or memory utilization) of one GPU, across polls."""

    last_seen_us: int = 0  # what to ask NVML for next time
    covered_to_us: int | None = None  # the end of what pieces already cover
    period_us: int | None = None  # the driver's period, as seen in the buffer

    def plan(self, samples: Samples) -> Plan:
        """The pieces these samples would cover (pure: the stream moves on in `take`)."""
        fresh = sorted(s for s in samples if s[0] > self.last_seen_us)
        diffs = [b[0] - a[0] for a, b in itertools.pairwise(fresh) if b[0] > a[0]]
        # The median: one late or early stamp does not move it.
        period = statistics.median_low(diffs) if diffs else self.period_us
        covered = self.covered_to_us
        spans: list[tuple[int, int, int | None]] = []
        for t, value in fresh:
            if covered is None:
                start = t - period if period is not None else t
            elif t <= covered:
                continue  # already covered (stamps never go back on a sane clock)
            elif period is not None and t - covered > GAP_PERIODS * period:
                spans.append((covered, t - period, None))
                start = t - period
            else:
                start = covered
            if t > start:
                spans.append((start, t, value))
            covered = t
        last_seen = fresh[-1][0] if fresh else self.last_seen_us
        return Plan(spans, period, covered, last_seen)

    def take(self, plan: Plan, instant: int | None) -> list[Piece]:
        """Move on past `plan`; its gaps are covered by `instant` (left out if None)."""
        self.period_us, self.covered_to_us = plan.period_us, plan.covered_to_us
        self.last_seen_us = plan.last_seen_us
        pieces: list[Piece] = []
        for start, end, value in plan.spans:
            if value is not None:
                pieces.append(Piece(start, end, value, True))
            elif instant is not None:
                pieces.append(Piece(start, end, instant, False))
        return pieces


def weighted_gauge(
    pieces: list[tuple[int, int, int, bool]], lo_us: int, hi_us: int
) -> tuple[int, int, int, int, bool, bool] | None:
    """(min, max, Σ value × µs, µs, any buffered, any gap) over the pieces' overlap with
    ``[lo_us, hi_us)``, or None when no piece overlaps it."""
    total = length = 0
    lo_v, hi_v = 101, -1
    buffered = gap = False
    for start, end, value, from_buffer in pieces:
        a, b = max(start, lo_us), min(end, hi_us)
        if b <= a:
            continue
        total += value * (b - a)
        length += b - a
        lo_v, hi_v = min(lo_v, value), max(hi_v, value)
        if from_buffer:
            buffered = True
        else:
            gap = True
    if length == 0:
        return None
    return lo_v, hi_v, total, length, buffered, gap

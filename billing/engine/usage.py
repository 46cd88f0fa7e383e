"""What a GPU did over any interval, to the second, from its telemetry minutes.

A ``GpuTimeline`` holds one GPU's inputs for a period: its telemetry windows (one minute
each), in-service intervals, maintenance windows and incidents that cover it. ``measure``
answers for any sub-interval — an ownership slice, a rental, a rate-card piece — so time can
be cut at any second, including inside a minute.

A window claims up or down only for the seconds its agent observed,
``[start + observed_from, start + observed_to)``; the rest of its minute is no_data (an agent
that started or stopped inside the minute did not see it). Its busy seconds are utilization ×
those observed up seconds. Its energy is the counter's rise over the whole minute, so a cut
inside the minute takes it pro rata over all 60 seconds, observed or not.

Busy seconds and energy are reckoned **per GPU-hour** at the precision the hourly rollups
store (Σ utilization % × seconds to 0.001, energy to 0.000000001 kWh, halves away from zero
as PostgreSQL rounds): the part of each UTC hour that a window covers is summed exactly,
then rounded once. That makes a measure over whole, clean hours computed from the rollups
identical, digit for digit, to one computed from the windows.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

from billing.engine.intervals import (
    Interval,
    StatePartition,
    intersect,
    normalize,
    partition_states,
    subtract,
    total_seconds,
)

WINDOW = timedelta(minutes=1)
MJ_PER_KWH = 3_600_000_000
UP_STATES = frozenset({"up", "degraded"})
BUSY_QUANTUM = Decimal("0.001")  # utilization % x seconds, as HourlyRollup.util_gpu_seconds
ENERGY_QUANTUM = Decimal("0.000000001")  # kWh, as HourlyRollup.energy_kwh


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def round_hour_figure(value: Fraction | Decimal, quantum: Decimal) -> Decimal:
    """One hour's exact sum rounded to ``quantum``, halves away from zero (SQL ``round``)."""
    exact = value if isinstance(value, Decimal) else exact_decimal(value)
    return exact.quantize(quantum, rounding=ROUND_HALF_UP)


def exact_decimal(value: Fraction) -> Decimal:
    # Enough digits that rounding to 9 places decides exactly like the rational would
    # (a tie has a short, exact expansion; anything else sits far from one).
    with localcontext() as context:
        context.prec = 60
        return Decimal(value.numerator) / Decimal(value.denominator)


@dataclass(frozen=True)
class TelemetryMinute:
    """One stored telemetry window: ``[start, start + 1 min)``, of which the agent observed
    ``[start + observed_from, start + observed_to)`` (whole seconds; 0–60 from v1 agents)."""

    start: datetime
    state: str  # up | degraded | down
    util_avg: Decimal | None  # 0–100; None when the GPU could not report it
    energy_kwh: Decimal  # counter delta attributed to this minute (resets already handled)
    # The same delta in millijoules when it came from the counter: exact, where kWh repeats.
    energy_mj: int | None = None
    observed_from: int = 0
    observed_to: int = 60

    @property
    def energy_exact_kwh(self) -> Fraction:
        if self.energy_mj is not None:
            return Fraction(self.energy_mj, MJ_PER_KWH)
        return Fraction(self.energy_kwh)

    @property
    def interval(self) -> Interval:
        """The whole minute: what its energy is spread over."""
        return Interval(self.start, self.start + WINDOW)

    @property
    def observed(self) -> Interval:
        """The seconds its state claims (up or down); the rest of the minute is no_data."""
        return Interval(
            self.start + timedelta(seconds=self.observed_from),
            self.start + timedelta(seconds=self.observed_to),
        )


@dataclass(frozen=True)
class Measure:
    """Seconds by state, busy seconds (Σ utilization × up seconds) and energy."""

    in_service_s: int
    maintenance_s: int
    down_s: int
    up_s: int
    no_data_s: int
    busy_s: Decimal  # utilization-weighted up seconds
    energy_kwh: Decimal
    operator_incident_s: int  # in-service seconds inside an operator-caused incident
    # Down seconds that only telemetry says were down: no incident (or maintenance) covers them.
    down_without_incident_s: int = 0

    @property
    def availability(self) -> Fraction | None:
        """up ÷ (in-service − maintenance); None when there is no such time."""
        denominator = self.in_service_s - self.maintenance_s
        return Fraction(self.up_s, denominator) if denominator else None

    @property
    def utilization(self) -> Fraction | None:
        """Time-weighted mean utilization over up seconds, 0–1; None without up time."""
        return Fraction(self.busy_s) / self.up_s if self.up_s else None

    @property
    def busy_gpu_hours(self) -> Decimal:
        return self.busy_s / 3600


@dataclass
class GpuTimeline:
    in_service: Sequence[Interval]
    minutes: Sequence[TelemetryMinute]
    maintenance: Sequence[Interval] = ()
    incidents: Sequence[Interval] = ()
    operator_incidents: Sequence[Interval] = ()
    _up: list[Interval] = field(init=False, repr=False)
    _down: list[Interval] = field(init=False, repr=False)
    _starts: list[datetime] = field(init=False, repr=False)
    _measured: dict[Interval, Measure] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.minutes = sorted(self.minutes, key=lambda m: m.start)
        self._starts = [m.start for m in self.minutes]
        self._up = normalize(m.observed for m in self.minutes if m.state in UP_STATES)
        down = [m.observed for m in self.minutes if m.state not in UP_STATES]
        self._down = normalize([*down, *self.incidents])

    def partition(self, window: Interval) -> StatePartition:
        return partition_states(
            in_service=intersect(self.in_service, [window]),
            maintenance=self.maintenance,
            down=self._down,
            up=self._up,
        )

    def measure(self, window: Interval) -> Measure:
        """Figures over window; memoized, as statements ask for the same pieces often."""
        if window not in self._measured:
            self._measured[window] = self._measure(window)
        return self._measured[window]

    def _measure(self, window: Interval) -> Measure:
        parts = self.partition(window)
        touching = self._minutes_touching(window)
        # Up seconds (and so busy) from the observed span, energy from the whole minute.
        up_seconds = _overlaps([m.observed for m in touching], parts.up)
        service_seconds = _overlaps([m.interval for m in touching], parts.in_service)
        busy_by_hour: dict[datetime, Decimal] = {}
        energy_by_hour: dict[datetime, Fraction] = {}
        for minute, up_here, counted in zip(touching, up_seconds, service_seconds, strict=True):
            hour = hour_of(minute.start)
            if minute.util_avg is not None and up_here:
                busy_by_hour[hour] = busy_by_hour.get(hour, Decimal(0)) + minute.util_avg * up_here
            if counted:
                energy_by_hour[hour] = (
                    energy_by_hour.get(hour, Fraction(0)) + minute.energy_exact_kwh * counted / 60
                )
        busy = sum((round_hour_figure(v, BUSY_QUANTUM) for v in busy_by_hour.values()), Decimal(0))
        energy = sum(
            (round_hour_figure(v, ENERGY_QUANTUM) for v in energy_by_hour.values()), Decimal(0)
        )
        return Measure(
            in_service_s=parts.in_service_seconds,
            maintenance_s=total_seconds(parts.maintenance),
            down_s=total_seconds(parts.down),
            up_s=total_seconds(parts.up),
            no_data_s=total_seconds(parts.no_data),
            busy_s=busy / 100,
            energy_kwh=energy,
            operator_incident_s=total_seconds(intersect(parts.in_service, self.operator_incidents)),
            down_without_incident_s=total_seconds(subtract(parts.down, self.incidents)),
        )

    def _minutes_touching(self, window: Interval) -> Sequence[TelemetryMinute]:
        first = bisect.bisect_right(self._starts, window.start - WINDOW)
        last = bisect.bisect_left(self._starts, window.end)
        return self.minutes[first:last]


def _overlaps(windows: Sequence[Interval], intervals: Sequence[Interval]) -> list[int]:
    """Seconds of each sorted window covered by sorted, disjoint intervals (one sweep)."""
    out: list[int] = []
    j = 0
    for window in windows:
        while j < len(intervals) and intervals[j].end <= window.start:
            j += 1
        covered = 0
        k = j
        while k < len(intervals) and intervals[k].start < window.end:
            start = max(window.start, intervals[k].start)
            end = min(window.end, intervals[k].end)
            covered += int((end - start).total_seconds())
            k += 1
        out.append(covered)
    return out

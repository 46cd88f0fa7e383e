"""A GPU's usage as a few pre-aggregated cells: the fast source behind closing a period.

The period is cut at every instant where something that matters changes — in-service,
maintenance, incidents, ownership, rentals, rate cards — so inside a cell all of those are
constant and the time state of each second only depends on the telemetry window there.
The database aggregates the telemetry per cell (hourly rollups for the whole hours inside
it, windows for the partial hours at its ends); ``CellUsage.measure`` then answers for any
interval made of whole cells with exactly the figures ``GpuTimeline.measure`` gives from the
raw minutes (same per-hour rounding of busy seconds and energy, see ``usage``).

Cells are plain data, serialisable to JSON: a published statement freezes them, and
recomputing from them reproduces the statement.
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from billing.engine.intervals import Interval
from billing.engine.usage import (
    BUSY_QUANTUM,
    ENERGY_QUANTUM,
    MJ_PER_KWH,
    Measure,
    round_hour_figure,
)
from core.instants import iso_z

SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class PartialHour:
    """The part of one UTC hour inside a cell, summed exactly (rounded only per hour)."""

    hour: datetime
    busy_pct_s: Decimal  # Σ utilization % x observed up seconds
    energy_mj_s: int  # Σ counter delta (mJ) x seconds of its minute counted (of all 60)


class Cell(NamedTuple):
    """Immutable and compared by value; a named tuple because a close makes ~31 per GPU
    (one per day), and a tuple is made and read several times faster than a frozen
    dataclass."""

    interval: Interval
    in_service: bool
    maintenance: bool
    incident: bool
    operator_incident: bool
    # What the telemetry says inside the cell, whatever the flags (the flags decide below):
    # only the seconds windows observed; the rest of the cell is no_data.
    telemetry_up_s: int = 0  # up or degraded
    telemetry_down_s: int = 0
    whole_busy_pct_s: Decimal = Decimal(0)  # Σ over whole hours, each rounded
    whole_energy_kwh: Decimal = Decimal(0)  # Σ over whole hours, each rounded
    partial: tuple[PartialHour, ...] = ()

    @property
    def seconds(self) -> int:
        return self.interval.seconds

    @property
    def counts_telemetry(self) -> bool:
        """Up/down come from telemetry only where no maintenance or incident claims time."""
        return self.in_service and not self.maintenance and not self.incident

    def to_json(self) -> list[Any]:
        interval, in_service, maintenance, incident, operator, up, down, busy, energy, partial = (
            self
        )
        return [
            _iso(interval.start),
            _iso(interval.end),
            1 if in_service else 0,
            1 if maintenance else 0,
            1 if incident else 0,
            1 if operator else 0,
            up,
            down,
            str(busy),
            str(energy),
            [[_iso(p.hour), str(p.busy_pct_s), p.energy_mj_s] for p in partial],
        ]

    def to_json_text(self) -> str:
        """``json.dumps(self.to_json())`` (default separators), built as text."""
        interval, in_service, maintenance, incident, operator, up, down, busy, energy, partial = (
            self
        )
        head = _json_head(interval, in_service, maintenance, incident, operator)
        tail = (
            json.dumps([[_iso(p.hour), str(p.busy_pct_s), p.energy_mj_s] for p in partial])
            if partial
            else "[]"
        )
        # %d: up and down are ints; a Decimal's str holds no character that JSON escapes.
        return f'{head}{up:d}, {down:d}, "{busy!s}", "{energy!s}", {tail}]'

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Cell:
        return cls(
            interval=Interval(_parse(data[0]), _parse(data[1])),
            in_service=bool(data[2]),
            maintenance=bool(data[3]),
            incident=bool(data[4]),
            operator_incident=bool(data[5]),
            telemetry_up_s=int(data[6]),
            telemetry_down_s=int(data[7]),
            whole_busy_pct_s=Decimal(data[8]),
            whole_energy_kwh=Decimal(data[9]),
            partial=tuple(PartialHour(_parse(h), Decimal(b), int(e)) for h, b, e in data[10]),
        )


@dataclass
class CellUsage:
    """``measure(interval)`` over consecutive cells; the interval must start and end on
    cell boundaries (the loader cuts cells wherever a caller will ask)."""

    cells: Sequence[Cell]
    _starts: list[datetime] = field(init=False, repr=False)
    _measured: dict[Interval, Measure] = field(init=False, repr=False, default_factory=dict)
    # Only for plain cells (``of_sorted``): the seconds of the cells before each, summed.
    _plain: Sequence[int] | None = field(init=False, repr=False, compare=False, default=None)
    # Only for cells without partial hours (``of_sorted``): their JSON text with the four
    # telemetry figures of each cell left as fields (``cells_json_template``).
    _json: str | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        self.cells = sorted(self.cells, key=lambda c: c.interval.start)
        self._starts = [c.interval.start for c in self.cells]

    @classmethod
    def of_sorted(
        cls,
        cells: list[Cell],
        *,
        plain_seconds: Sequence[int] | None = None,
        json_template: str | None = None,
    ) -> CellUsage:
        """The same for cells already in time order (a close's ~310k: no sort, no key call).

        ``plain_seconds``: every cell is plain — in service, no maintenance, incident or
        operator incident, no partial hour (most GPUs of a close) — and these are the seconds
        of the cells before each (``[0, s0, s0 + s1, …]``, shared by every GPU cut alike):
        a measure is then a few sums taken in C (``_plain_measure``).

        ``json_template``: no cell has a partial hour, and this is ``cells_json_template`` of
        their heads (shared, as ``plain_seconds``, by every GPU cut alike): ``cells_json``
        then fills it in one formatting."""
        usage = cls.__new__(cls)
        usage.cells = cells
        usage._starts = [c[0][0] for c in cells]
        usage._measured = {}
        usage._plain = plain_seconds
        usage._json = json_template
        return usage

    def cells_json(self) -> str:
        """``cells_json_text(self.cells)``; from the template where there is one."""
        if self._json is None:
            return cells_json_text(self.cells)
        return self._json % tuple(chain.from_iterable(map(_TELEMETRY, self.cells)))

    @property
    def span(self) -> Interval:
        return Interval(self.cells[0].interval.start, self.cells[-1].interval.end)

    def measure(self, window: Interval) -> Measure:
        if window not in self._measured:
            self._measured[window] = self._measure(window)
        return self._measured[window]

    def _measure(self, window: Interval) -> Measure:
        first = bisect.bisect_left(self._starts, window.start)
        last = bisect.bisect_left(self._starts, window.end, first)
        chosen = self.cells[first:last]
        if (
            not chosen
            or chosen[0].interval.start != window.start
            or chosen[-1].interval.end != window.end
        ):
            raise ValueError(f"{window} does not start and end on cell boundaries")
        if self._plain is not None:
            return _plain_measure(chosen, self._plain[last] - self._plain[first])
        in_service = maintenance = down = up = operator = telemetry_down = 0
        busy_whole = Decimal(0)
        energy_whole = Decimal(0)
        busy_partial: dict[datetime, Decimal] = {}
        energy_partial: dict[datetime, int] = {}
        # A loop over ~31 cells per GPU: kept tight (fields unpacked, not read by name).
        for (
            (start, end),
            cell_in_service,
            cell_maintenance,
            cell_incident,
            cell_operator,
            cell_up,
            cell_down,
            cell_busy,
            cell_energy,
            partial,
        ) in chosen:
            if not cell_in_service:
                continue
            seconds = (end - start) // SECOND
            in_service += seconds
            if cell_operator:
                operator += seconds
            energy_whole += cell_energy
            for piece in partial:
                energy_partial[piece.hour] = energy_partial.get(piece.hour, 0) + piece.energy_mj_s
            if cell_maintenance:
                maintenance += seconds
            elif cell_incident:
                down += seconds
            else:
                up += cell_up
                down += cell_down
                telemetry_down += cell_down
                busy_whole += cell_busy
                for piece in partial:
                    busy_partial[piece.hour] = (
                        busy_partial.get(piece.hour, Decimal(0)) + piece.busy_pct_s
                    )
        busy = busy_whole + sum(
            (round_hour_figure(v, BUSY_QUANTUM) for v in busy_partial.values()), Decimal(0)
        )
        energy = energy_whole + sum(
            (
                round_hour_figure(Fraction(v, 60 * MJ_PER_KWH), ENERGY_QUANTUM)
                for v in energy_partial.values()
            ),
            Decimal(0),
        )
        return Measure(
            in_service_s=in_service,
            maintenance_s=maintenance,
            down_s=down,
            up_s=up,
            no_data_s=in_service - maintenance - down - up,
            busy_s=busy / 100,
            energy_kwh=energy,
            operator_incident_s=operator,
            down_without_incident_s=telemetry_down,
        )


_UP, _DOWN, _BUSY, _ENERGY = (itemgetter(i) for i in (5, 6, 7, 8))
_TELEMETRY = itemgetter(5, 6, 7, 8)


def _plain_measure(cells: Sequence[Cell], in_service: int) -> Measure:
    """``CellUsage._measure`` of plain cells (see ``of_sorted``), ``in_service`` being their
    seconds: every second is in service, up, down or no data, and the sums are taken in C —
    the same additions in the same order as the loop (a Decimal sum's exponent follows them)."""
    return plain_measure_of(
        in_service,
        sum(map(_UP, cells)),
        sum(map(_DOWN, cells)),
        sum(map(_BUSY, cells), Decimal(0)),
        sum(map(_ENERGY, cells), Decimal(0)),
    )


def plain_measure_of(
    in_service: int, up: int, down: int, busy: Decimal, energy: Decimal
) -> Measure:
    """The measure of plain cells from their sums (``_plain_measure``). ``busy`` and
    ``energy`` are summed exactly, starting from ``Decimal(0)`` (an exact sum of the same
    values has the same digits and exponent, in whatever order)."""
    busy += Decimal(0)
    energy += Decimal(0)
    return Measure(
        in_service_s=in_service,
        maintenance_s=0,
        down_s=down,
        up_s=up,
        no_data_s=in_service - down - up,
        busy_s=busy / 100,
        energy_kwh=energy,
        operator_incident_s=0,
        down_without_incident_s=down,
    )


# A whole day's telemetry as the day sums hand it over: up and down seconds, and busy and
# energy as the text ``str()`` gives of their Decimals.
DayText = tuple[int, int, str, str]


class DayRunUsage(CellUsage):
    """A GPU whose cells are all whole days and plain, and whose days are all those summed
    (most GPUs of a close: in service all period, nothing else cutting them), kept as the
    day sums hand them over: each day's figures as text, and their sums over the period.

    A close needs such a GPU's cells only as JSON and their measure over the whole span: the
    JSON is its shape's template filled with the texts, the measure comes from the sums,
    and no cell is made. Anything else (a measure of a part of the span, the cells
    themselves) makes the cells first, exactly as ``CellUsage.of_sorted`` would hold them."""

    _heads: Sequence[tuple[Interval, bool, bool, bool, bool]]
    _days: Sequence[DayText]
    _made: list[Cell] | None
    _template: str

    @classmethod
    def of_days(
        cls,
        heads: Sequence[tuple[Interval, bool, bool, bool, bool]],
        days: Sequence[DayText],
        *,
        sums: tuple[int, int, Decimal, Decimal],
        plain_seconds: Sequence[int],
        json_template: str,
    ) -> DayRunUsage:
        """``heads``: the cells' bounds and flags (plain); ``days``: each cell's figures;
        ``sums``: up, down, busy and energy summed over all of them (exactly, as
        ``plain_measure_of`` takes them)."""
        usage = cls.__new__(cls)
        usage._heads = heads
        usage._days = days
        usage._made = None
        usage._starts = [head[0].start for head in heads]
        usage._plain = plain_seconds
        usage._json = usage._template = json_template
        span = Interval(heads[0][0].start, heads[-1][0].end)
        usage._measured = {span: plain_measure_of(plain_seconds[-1], *sums)}
        return usage

    @property
    def cells(self) -> Sequence[Cell]:
        if self._made is None:
            self._made = [
                tuple.__new__(Cell, (*head, up, down, Decimal(busy), Decimal(energy), ()))
                for head, (up, down, busy, energy) in zip(self._heads, self._days, strict=True)
            ]
        return self._made

    @cells.setter
    def cells(self, cells: Sequence[Cell]) -> None:
        self._made = list(cells)

    @property
    def span(self) -> Interval:
        return Interval(self._heads[0][0].start, self._heads[-1][0].end)

    def cells_json(self) -> str:
        return self._template % tuple(chain.from_iterable(self._days))


# Cached: a close writes the same instants (midnights, cuts) for every GPU.
_iso = functools.lru_cache(maxsize=4096)(iso_z)


@functools.lru_cache(maxsize=4096)
def _json_head(
    interval: Interval, in_service: bool, maintenance: bool, incident: bool, operator: bool
) -> str:
    """A cell's JSON text up to its telemetry figures: its bounds and flags (the same for
    the same day of every GPU cut alike)."""
    flags = [1 if flag else 0 for flag in (in_service, maintenance, incident, operator)]
    return json.dumps([_iso(interval.start), _iso(interval.end), *flags])[:-1] + ", "


def cells_json_text(cells: Sequence[Cell]) -> str:
    """``json.dumps([cell.to_json() for cell in cells])``, as text built per cell: a close
    freezes ~31 cells per GPU, and the lists and their encoding cost ~3 × this."""
    head = _json_head
    return (
        "["
        + ", ".join(
            [
                _WHOLE_HOURS_CELL % (head(*cell[:5]), cell[5], cell[6], str(cell[7]), str(cell[8]))
                if not cell[9]
                else cell.to_json_text()
                for cell in cells
            ]
        )
        + "]"
    )


# A cell without partial hours, after its head (see ``Cell.to_json_text``).
_WHOLE_HOURS_CELL = '%s%d, %d, "%s", "%s", []]'


def cells_json_template(heads: Sequence[tuple[Interval, bool, bool, bool, bool]]) -> str:
    """The JSON text of cells with these heads (bounds and flags) and no partial hours,
    each cell's up and down seconds, busy and energy left as ``%d, %d, "%s", "%s"``: filled
    with those four of each cell in turn, it is ``cells_json_text`` of the cells (``%s`` is
    ``str()`` of a Decimal). A close fills one per GPU; most GPUs share theirs."""
    tail = _WHOLE_HOURS_CELL[2:]
    return "[" + ", ".join(_json_head(*head).replace("%", "%%") + tail for head in heads) + "]"


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text)

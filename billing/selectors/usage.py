"""Usage sources read from the database: cells aggregated in SQL, and the reference timeline.

``cells_load`` cuts each GPU's range into cells (see ``billing.engine.cells``) and lets
PostgreSQL aggregate them in two set-wise queries: hourly rollups for the whole hours inside a
cell, windows for the partial hours at its ends (a cell that is one whole UTC day, as a close
cuts most of them, reads that day's row of the daily rollups instead). ``timeline_load`` reads
the raw minutes into ``GpuTimeline``, the reference implementation; both give identical
measures (tested).

A window's energy is its counter's increase over the GPU's previous reading (rule 6 of
docs/accounting.md: in its hour, else in the two days before, else across a silence), or its
own value when the counter went backwards (a reset) — exactly as ``telemetry.services.derived``
computes rollups, with the same SQL for the hour's first reading.
A window's up or down seconds (and busy: utilization × up seconds) are only those its agent
observed, ``[window_start + observed_from, window_start + observed_to)``, as the rollups count
them; its energy is spread over the whole minute, so a range that cuts the minute takes it pro
rata of 60 s.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db import connection, transaction

from billing.engine.cells import (
    Cell,
    CellUsage,
    DayRunUsage,
    DayText,
    PartialHour,
    cells_json_template,
)
from billing.engine.intervals import Interval, normalize
from billing.engine.usage import (
    BUSY_QUANTUM,
    ENERGY_QUANTUM,
    MJ_PER_KWH,
    GpuTimeline,
    TelemetryMinute,
    hour_of,
    round_hour_figure,
)
from billing.selectors.facts import GpuFacts
from telemetry.services.derived import energy_reading_before_sql

HOUR = timedelta(hours=1)

# The previous reading (docs/accounting.md rule 6): the latest earlier reading in the window's
# own hour, else the one the rollups take for the hour's first reading (the same SQL).
_DELTA = f"""
LEFT JOIN LATERAL (
    SELECT coalesce((
               SELECT p.energy_mj FROM telemetry_window p
                WHERE p.gpu_id = w.gpu_id AND p.window_start < w.window_start
                  AND p.window_start >= date_trunc('hour', w.window_start, 'UTC')
                  AND p.energy_mj IS NOT NULL
                ORDER BY p.window_start DESC LIMIT 1), (
               {energy_reading_before_sql("w.gpu_id", "date_trunc('hour', w.window_start, 'UTC')")}
           )) AS energy_mj) AS prev ON true
CROSS JOIN LATERAL (SELECT CASE
    WHEN w.energy_mj IS NULL OR prev.energy_mj IS NULL THEN 0
    WHEN w.energy_mj >= prev.energy_mj THEN w.energy_mj - prev.energy_mj
    ELSE w.energy_mj END AS delta_mj) AS d
"""  # noqa: S608 - constants only, no input

# Per range and hour: up and down seconds (the range's overlap with each window's observed
# span, ``seen``), busy (utilization × those up seconds), and energy × seconds (the counter
# delta times the range's overlap with the whole minute, ``s``: energy is spread over all 60).
_WINDOW_PIECES = f"""
SELECT r.idx, date_trunc('hour', w.window_start, 'UTC') AS hour,
       coalesce(sum(o.seen) FILTER (WHERE w.state IN ('up', 'degraded')), 0),
       coalesce(sum(o.seen) FILTER (WHERE w.state = 'down'), 0),
       coalesce(sum(w.util_gpu_avg::numeric * o.seen)
                FILTER (WHERE w.state IN ('up', 'degraded')), 0),
       coalesce(sum(d.delta_mj * o.s), 0)
  FROM billing_usage_range r
  JOIN telemetry_window w ON w.gpu_id = r.gpu_id
   AND w.window_start > r.lo - interval '60 seconds' AND w.window_start < r.hi
  {_DELTA}
 CROSS JOIN LATERAL (SELECT
    extract(epoch FROM
        least(w.window_start + interval '60 seconds', r.hi) - greatest(w.window_start, r.lo)
    )::bigint AS s,
    greatest(extract(epoch FROM
        least(w.window_start + w.observed_to * interval '1 second', r.hi)
        - greatest(w.window_start + w.observed_from * interval '1 second', r.lo)
    )::bigint, 0) AS seen) AS o
 GROUP BY r.idx, hour
"""  # noqa: S608 - constants only, no input

_ROLLUP_WHOLE_HOURS = """
SELECT c.idx, sum(h.seconds_up + h.seconds_degraded), sum(h.seconds_down),
       sum(h.util_gpu_seconds), sum(h.energy_kwh)
  FROM billing_usage_cell c
  JOIN telemetry_hourlyrollup h ON h.gpu_id = c.gpu_id AND h.hour >= c.h0 AND h.hour < c.h1
 WHERE c.h0 < c.h1 AND NOT c.common
 GROUP BY c.idx
"""

# The same for a few cells (a series of one GPU cut at every hour or day): one probe of the
# (gpu, hour) index per cell. The join above would merge the whole rollup index against them.
_ROLLUP_WHOLE_HOURS_FEW = """
SELECT c.idx, a.up, a.down, a.busy, a.energy
  FROM billing_usage_cell c
 CROSS JOIN LATERAL (
       SELECT count(*) AS n, sum(h.seconds_up + h.seconds_degraded) AS up,
              sum(h.seconds_down) AS down, sum(h.util_gpu_seconds) AS busy,
              sum(h.energy_kwh) AS energy
         FROM telemetry_hourlyrollup h
        WHERE h.gpu_id = c.gpu_id AND h.hour >= c.h0 AND h.hour < c.h1) a
 WHERE c.h0 < c.h1 AND NOT c.common AND a.n > 0
"""
# Up to this many cells outside the common span, probe per cell; beyond, join once.
FEW_CELLS = 2_000

# The cells that span the most common range of whole hours (usually the whole period: a GPU
# with one owner and one rate card all month) are at most one per GPU, so the rollups can be
# summed per GPU first — one scan with the cost of a plain aggregate — and joined after.
_ROLLUP_COMMON_HOURS = """
SELECT c.idx, a.up, a.down, a.busy, a.energy
  FROM billing_usage_cell c
  JOIN (SELECT h.gpu_id, sum(h.seconds_up + h.seconds_degraded) AS up,
               sum(h.seconds_down) AS down, sum(h.util_gpu_seconds) AS busy,
               sum(h.energy_kwh) AS energy
          FROM telemetry_hourlyrollup h
         WHERE h.hour >= %(h0)s AND h.hour < %(h1)s
         GROUP BY h.gpu_id) a ON a.gpu_id = c.gpu_id
 WHERE c.common
"""
_ROLLUP_COMMON_HOURS_FEW_GPUS = _ROLLUP_COMMON_HOURS.replace(
    "WHERE h.hour >=", "WHERE h.gpu_id = ANY(%(gpus)s) AND h.hour >="
)
# Up to this many GPUs in the common span (an owner's fleet, not the whole site's), the
# aggregate reads only theirs through the (gpu, hour) index: summing every GPU's rollups to
# keep a hundred of them cost ~15 × as much on a 2,000-GPU site.
FEW_COMMON_GPUS = 1_000


# Whole UTC days (the close cuts every GPU's period at each midnight, so most of its cells are
# one whole day of hours): their sums are telemetry's daily rollups, one row per GPU and UTC
# day that the database keeps equal to the day's hourly rollups summed (telemetry migration
# 0011) — ~310k rows for a month of 10,000 GPUs, where summing the 7.4M hourly rows per day
# cost as much as the plain aggregate (docs/scaling.md, goal 4a). The cells then take their
# day's sums in Python and never go into the temp table. Each day as its offset from the first
# and each GPU id as text: no date or UUID object made per row. Busy and energy come as the
# text ``str()`` gives of their Decimals (a Decimal is made only where a cell is), and each
# GPU's days summed comes beside them, from the same snapshot, as one row with no day.
def _decimal_text_9(value: str) -> str:
    """SQL: a numeric of scale 9 as Python's ``str()`` of its Decimal — PostgreSQL's own text
    from 10⁻⁶ on (the two agree there), scientific notation below as Python writes it
    (0 → ``0E-9``, 0.000000123 → ``1.23E-7``). Scale 3, as busy, never differs."""
    digits = f"(abs({value}) * 1000000000)::numeric(40, 0)::text"
    return f"""CASE WHEN abs({value}) >= 0.000001 THEN ({value})::text
            ELSE (CASE WHEN {value} < 0 THEN '-' ELSE '' END) || left({digits}, 1)
                 || CASE WHEN length({digits}) > 1 THEN '.' || substr({digits}, 2) ELSE '' END
                 || 'E' || (length({digits}) - 10)::text END"""


def _daily_sums(where: str) -> str:
    return f"""
SELECT d.day - %(first)s::date, d.gpu_id::text, d.seconds_up::bigint, d.seconds_down::bigint,
       d.util_gpu_seconds::text, {_decimal_text_9("d.energy_kwh")}, NULL::numeric, NULL::numeric
  FROM telemetry_dailyrollup d
 WHERE d.day = ANY(%(days)s::date[]) {where}
 UNION ALL
SELECT NULL, d.gpu_id::text, sum(d.seconds_up), sum(d.seconds_down), NULL, NULL,
       sum(d.util_gpu_seconds), sum(d.energy_kwh)
  FROM telemetry_dailyrollup d
 WHERE d.day = ANY(%(days)s::date[]) {where}
 GROUP BY d.gpu_id
"""  # noqa: S608 - constants only


_DAILY_SUMS = _daily_sums("")
# The same for some GPUs only: through the (gpu, day) key.
_DAILY_SUMS_OF = _daily_sums("AND d.gpu_id = ANY(%(gpus)s::uuid[])")
# From this many whole-day cells on, every GPU's days are read (one scan of the day index);
# below, only those of the GPUs asked about. For at most this many days either way.
DAY_CELLS = 2_000
MAX_DAYS = 62
DAY = timedelta(days=1)

_TEMP = """
CREATE TEMP TABLE IF NOT EXISTS billing_usage_cell (
    idx integer PRIMARY KEY, gpu_id uuid, lo timestamptz, hi timestamptz,
    h0 timestamptz, h1 timestamptz, common boolean) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS billing_usage_range (
    idx integer, gpu_id uuid, lo timestamptz, hi timestamptz) ON COMMIT DROP;
TRUNCATE billing_usage_cell, billing_usage_range;
"""


# A whole-hours cell's figures after its bounds and flags: (up, down, busy, energy, no partial
# hours), as ``Cell`` holds them.
CellTail = tuple[int, int, Decimal, Decimal, tuple[()]]


# A day without a rollup: nothing observed (as a cell's tail, and as the day sums' text).
NOTHING: CellTail = (0, 0, Decimal(0), Decimal(0), ())
NOTHING_TEXT: DayText = (0, 0, "0", "0")


class DaySums:
    """Every GPU's daily rollups for whole UTC days, as ``by_gpu()``: GPU id as text → per
    day of ``days``, in order, (up, down, busy, energy) with busy and energy as the text of
    their Decimals — up being up and degraded seconds, as the cells count them;
    ``NOTHING_TEXT`` for a day without a rollup. ``totals()``: per GPU, the four summed over
    all ``days`` (busy and energy as Decimals; no entry for a GPU without any). A GPU cut
    into exactly these days takes them as they are (``DayRunUsage``).

    ``DaySums.start`` reads them on a connection of its own, in a thread, while the caller
    goes on loading facts and cutting cells; ``by_gpu()`` waits for it. The sums are the
    same as from the caller's connection whenever it sees the same committed rollups, so this
    is only for a caller outside a transaction (``start`` returns None inside one: a thread
    could not see its writes). ``DaySums.read`` reads them at once, on the caller's connection.
    """

    def __init__(self, days: Sequence[datetime], gpus: Collection[str] | None = None) -> None:
        self.days = list(days)
        self.gpus = None if gpus is None else sorted(gpus)  # None: every GPU
        self.position = {day: i for i, day in enumerate(self.days)}
        self._sums: dict[str, list[DayText]] = {}
        self._totals: dict[str, tuple[int, int, Decimal, Decimal]] = {}
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def read(cls, days: Sequence[datetime], gpus: Collection[str] | None = None) -> DaySums:
        sums = cls(days, gpus)
        sums._sums, sums._totals = sums._query()
        return sums

    @classmethod
    def start(cls, window: Interval) -> DaySums | None:
        first = _ceil_day(window.start)
        days: list[datetime] = []
        while first + DAY <= window.end and len(days) < MAX_DAYS:
            days.append(first)
            first += DAY
        if not days or connection.in_atomic_block:
            return None
        sums = cls(days)
        sums._thread = threading.Thread(target=sums._run, name="billing-day-sums", daemon=True)
        sums._thread.start()
        return sums

    def _query(
        self,
    ) -> tuple[dict[str, list[DayText]], dict[str, tuple[int, int, Decimal, Decimal]]]:
        first = self.days[0].date()
        # A day's position in ``days`` from its distance to the first (days need not follow
        # one another).
        slot = {(day.date() - first).days: i for i, day in enumerate(self.days)}
        empty = [NOTHING_TEXT] * len(self.days)
        sums: dict[str, list[DayText]] = {}
        totals: dict[str, tuple[int, int, Decimal, Decimal]] = {}
        # Every GPU's days summed is a hash of all of them: in memory, in a transaction of its
        # own (a few GPUs' need neither).
        whole_fleet = self.gpus is None
        with (
            transaction.atomic() if whole_fleet else contextlib.nullcontext(),
            connection.cursor() as cursor,
        ):
            if whole_fleet:
                cursor.execute("SET LOCAL work_mem = '64MB'")
            cursor.execute(
                _DAILY_SUMS if self.gpus is None else _DAILY_SUMS_OF,
                {"first": first, "days": [day.date() for day in self.days], "gpus": self.gpus},
            )
            for i, gpu_key, up, down, busy, energy, busy_sum, energy_sum in cursor.fetchall():
                if i is None:  # the GPU's days summed
                    totals[gpu_key] = (up, down, busy_sum, energy_sum)
                    continue
                days = sums.get(gpu_key)
                if days is None:
                    days = sums[gpu_key] = empty.copy()
                days[slot[i]] = (up, down, busy, energy)
        return sums, totals

    def _run(self) -> None:
        try:
            self._sums, self._totals = self._query()  # on this thread's own connection
        except BaseException as exc:  # handed to the caller by by_gpu()
            self._error = exc
        finally:
            connection.close()

    def by_gpu(self) -> dict[str, list[DayText]]:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._sums

    def totals(self) -> dict[str, tuple[int, int, Decimal, Decimal]]:
        self.by_gpu()
        return self._totals

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()


def _ceil_day(at: datetime) -> datetime:
    utc = at.astimezone(UTC)
    floor = utc.replace(hour=0, minute=0, second=0, microsecond=0)
    return floor if floor == utc else floor + DAY


def _ceil_hour(at: datetime) -> datetime:
    floor = hour_of(at)
    return floor if floor == at else floor + HOUR


def cell_bounds(fact: GpuFacts, extra_cuts: Iterable[datetime] = ()) -> list[Interval]:
    cuts = {fact.range.start, fact.range.end, *fact.boundaries()}
    cuts.update(t for t in extra_cuts if fact.range.start < t < fact.range.end)
    return [Interval(a, b) for a, b in itertools.pairwise(sorted(cuts))]


def _is_midnight(at: datetime) -> bool:
    """A UTC midnight (the days the rollups are summed by are UTC days)."""
    utc = at.astimezone(UTC)
    return utc == utc.replace(hour=0, minute=0, second=0, microsecond=0)


def _covered(intervals: Sequence[Interval], starts: Sequence[datetime]) -> list[bool]:
    """For each of the sorted instants, whether one of the intervals covers it (one sweep)."""
    if not intervals:
        return [False] * len(starts)
    merged = normalize(intervals)
    out: list[bool] = []
    j = 0
    for at in starts:
        while j < len(merged) and merged[j].end <= at:
            j += 1
        out.append(j < len(merged) and merged[j].start <= at)
    return out


@dataclass(frozen=True)
class _Shape:
    """How a GPU's period is cut, shared by every GPU cut alike: each cell's bounds and flags
    (in service, maintenance, incident, operator incident), and what to query for it."""

    cells: list[tuple[Interval, tuple[bool, bool, bool, bool]]]
    # In-service cells to aggregate: (position, first whole hour, end of the last, the
    # partial hours' ranges to read from the windows).
    queried: list[tuple[int, datetime, datetime, list[tuple[datetime, datetime]]]]
    others: list[tuple[int, datetime, datetime, list[tuple[datetime, datetime]]]]  # not days
    days: list[tuple[int, datetime]]  # (position, day) of the cells that are a day's hours
    day_of: dict[int, datetime]
    partial_days: bool  # a day cell also has partial hours at its ends (windows)
    # Per cell: its first five fields (bounds and flags), and its day or None.
    heads: list[tuple[Interval, bool, bool, bool, bool]]
    days_at: list[datetime | None]
    no_days: list[None]
    # Every cell in service, with no maintenance or incident: the seconds of the cells before
    # each (``CellUsage.of_sorted``'s ``plain_seconds``); else None.
    plain_seconds: list[int] | None

    @classmethod
    def of(
        cls,
        fact: GpuFacts,
        extra: Iterable[datetime],
        hours_of: Callable[[datetime], tuple[datetime, datetime, bool]],
        use_rollups: bool,
    ) -> _Shape:
        bounds = cell_bounds(fact, extra)
        starts = [b.start for b in bounds]
        flags = zip(
            _covered(fact.in_service, starts),
            _covered(fact.maintenance, starts),
            _covered(fact.incidents, starts),
            _covered(fact.operator_incidents, starts),
            strict=True,
        )
        cells = list(zip(bounds, flags, strict=True))
        queried = []
        days = []
        for i, (cell, (in_service, *_)) in enumerate(cells):
            if not in_service:
                continue
            h0, h1 = hours_of(cell.start)[0], hours_of(cell.end)[1]
            ranges = []
            if not use_rollups:
                h0 = h1 = cell.start  # no whole hours from rollups: windows for everything
                ranges.append((cell.start, cell.end))
            elif h0 > h1:  # inside one hour
                ranges.append((cell.start, cell.end))
            else:
                if cell.start < h0:
                    ranges.append((cell.start, h0))
                if h1 < cell.end:
                    ranges.append((h1, cell.end))
                if h1 - h0 == DAY and hours_of(h0)[2]:
                    days.append((i, h0))
            queried.append((i, h0, h1, ranges))
        day_of = dict(days)
        others = [q for q in queried if q[0] not in day_of]
        partial_days = any(q[3] for q in queried if q[0] in day_of)
        heads = [(bounds, *flags) for bounds, flags in cells]
        days_at = [day_of.get(i) for i in range(len(cells))]
        plain = all(flags == (True, False, False, False) for _, flags in cells)
        seconds = itertools.accumulate((b.seconds for b, _ in cells), initial=0) if plain else None
        return cls(
            cells,
            queried,
            others,
            days,
            day_of,
            partial_days,
            heads,
            days_at,
            [None] * len(cells),
            list(seconds) if seconds is not None else None,
        )

    @functools.cached_property
    def json_template(self) -> str:
        """The cells' JSON text to fill (``cells_json_template``), made once per shape."""
        return cells_json_template(self.heads)


def cells_load(
    *,
    facts: Sequence[GpuFacts],
    extra_cuts: dict[uuid.UUID, set[datetime]] | None = None,
    use_rollups: bool = True,
) -> dict[uuid.UUID, CellUsage]:
    """A ``CellUsage`` per GPU. ``use_rollups=False`` reads whole hours from the windows
    too (the two must agree; the rollups are much cheaper)."""
    return cells_load_many(groups=[(facts, extra_cuts or {})], use_rollups=use_rollups)[0]


def cells_load_many(
    *,
    groups: Sequence[tuple[Sequence[GpuFacts], dict[uuid.UUID, set[datetime]]]],
    use_rollups: bool = True,
    day_sums: DaySums | None = None,
) -> list[dict[uuid.UUID, CellUsage]]:
    """``cells_load`` for several groups of facts (one per cluster: a GPU that moved has
    facts in each) in the same two queries, so the rollups are scanned once for all.
    ``day_sums``: the whole days' sums, already asked for (``DaySums.start``)."""
    # Instants repeat across GPUs (midnights, rate-card changes): their hours once each.
    hours: dict[datetime, tuple[datetime, datetime, bool]] = {}

    def hours_of(at: datetime) -> tuple[datetime, datetime, bool]:
        known = hours.get(at)
        if known is None:
            known = hours[at] = (_ceil_hour(at), hour_of(at), _is_midnight(at))
        return known

    # Most GPUs are cut alike (the same period, midnights and rate cards, in service
    # throughout): their cells' bounds, flags and plan are worked out once and shared.
    shared: dict[tuple[Any, ...], _Shape] = {}

    def shape_of(fact: GpuFacts, extra: Iterable[datetime]) -> _Shape:
        key = (
            fact.range,
            id(extra),
            tuple(sorted(fact.boundaries())),
            *(tuple(i) for i in (fact.in_service, fact.maintenance, fact.incidents)),
            tuple(fact.operator_incidents),
        )
        known = shared.get(key)
        if known is None:
            known = shared[key] = _Shape.of(fact, extra, hours_of, use_rollups)
        return known

    # Per fact: its group, the fact, the index of its first cell, its shape.
    shapes: list[tuple[int, GpuFacts, int, _Shape]] = []
    first = 0
    for group, (facts, extra_cuts) in enumerate(groups):
        for fact in facts:
            shape = shape_of(fact, extra_cuts.get(fact.gpu_id, ()))
            shapes.append((group, fact, first, shape))
            first += len(shape.cells)
    day_count = sum(len(shape.days) for _, _, _, shape in shapes)
    days = sorted({day for shape in shared.values() for _, day in shape.days})
    by_day = day_count > 0 and len(days) <= MAX_DAYS

    cell_rows: list[tuple[Any, ...]] = []
    range_rows: list[tuple[Any, ...]] = []
    for _, fact, first, shape in shapes:
        gpu_id = fact.gpu_id
        # With the per-day sums, day cells are not queried (unless they have partial hours).
        queried = shape.others if by_day and not shape.partial_days else shape.queried
        for i, h0, h1, ranges in queried:
            idx = first + i
            if ranges:
                range_rows.extend((idx, gpu_id, lo, hi) for lo, hi in ranges)
            if not (by_day and i in shape.day_of):
                bounds = shape.cells[i][0]
                cell_rows.append((idx, gpu_id, bounds.start, bounds.end, h0, h1))
    spans = Counter((row[4], row[5]) for row in cell_rows if row[4] < row[5])
    common = spans.most_common(1)[0][0] if spans else None
    cell_rows = [(*row, (row[4], row[5]) == common) for row in cell_rows]

    by_gpu: dict[str, list[DayText]] = {}
    totals: dict[str, tuple[int, int, Decimal, Decimal]] = {}
    position: dict[datetime, int] = {}
    all_days = slice(0, 0)
    if by_day:
        if day_sums is None or not set(days) <= set(day_sums.days):
            few = {str(fact.gpu_id) for _, fact, _, shape in shapes if shape.days}
            day_sums = DaySums.read(days, None if day_count >= DAY_CELLS else few)
        by_gpu, totals, position = day_sums.by_gpu(), day_sums.totals(), day_sums.position
        all_days = slice(0, len(day_sums.days))
    whole: dict[int, CellTail] = {}
    pieces: dict[int, list[tuple[datetime, int, int, Decimal, int]]] = defaultdict(list)
    if cell_rows or range_rows:
        sums = _few_sums if len(cell_rows) + len(range_rows) <= FEW_ROWS else _many_sums
        whole_rows, piece_rows = sums(cell_rows, range_rows, common, use_rollups)
        for idx, up, down, busy, energy in whole_rows:
            whole[idx] = (int(up), int(down), busy, energy, ())
        for idx, hour, up, down, busy, energy in piece_rows:
            pieces[idx].append((hour, int(up), int(down), busy, int(energy)))

    # Shapes whose cells are all whole days, one after another among the day sums' days (a
    # GPU in service all period, most of a close): each GPU's cells are its heads and one
    # slice of its days. No cell of theirs has a partial hour (with per-day sums, nothing
    # else was read for them). Plain and over all the days summed, they stay the day sums'
    # text and sums (``DayRunUsage``: no cell is made unless asked for).
    runs: dict[int, slice | None] = {}
    for _, _, _, shape in shapes:
        if id(shape) not in runs:
            runs[id(shape)] = _day_run(shape, position) if by_day else None
    usages: list[dict[uuid.UUID, CellUsage]] = [{} for _ in groups]
    for group, fact, first, shape in shapes:
        gpu_key = str(fact.gpu_id)
        day_tails = by_gpu.get(gpu_key)
        run = runs[id(shape)]
        if run is not None:
            texts = day_tails[run] if day_tails else [NOTHING_TEXT] * len(shape.heads)
            if run == all_days and shape.plain_seconds is not None:
                usages[group][fact.gpu_id] = DayRunUsage.of_days(
                    shape.heads,
                    texts,
                    sums=totals.get(gpu_key, NO_SUMS),
                    plain_seconds=shape.plain_seconds,
                    json_template=shape.json_template,
                )
            else:
                usages[group][fact.gpu_id] = CellUsage.of_sorted(
                    [
                        tuple.__new__(Cell, head + _tail(text))
                        for head, text in zip(shape.heads, texts, strict=True)
                    ],
                    plain_seconds=shape.plain_seconds,
                    json_template=shape.json_template,
                )
            continue
        cells: list[Cell] = []
        days_at = shape.days_at if by_day else shape.no_days
        plain_seconds = shape.plain_seconds  # unless a cell has a partial hour
        whole_hours = True  # no cell has a partial hour
        for i, head in enumerate(shape.heads):
            idx = first + i
            day = days_at[i]
            if day is not None:
                tail = _tail(day_tails[position[day]]) if day_tails else NOTHING
            else:
                tail = whole.get(idx, NOTHING)
            if idx not in pieces:  # whole hours only (most cells): the ten fields as one tuple
                cells.append(tuple.__new__(Cell, head + tail))
                continue
            bounds, in_service, maintenance, incident, operator = head
            up, down, busy_whole, energy_whole, _ = tail
            partial: list[PartialHour] = []
            for hour, piece_up, piece_down, busy, energy_mj_s in sorted(pieces[idx]):
                up += piece_up
                down += piece_down
                if bounds.start <= hour and hour + HOUR <= bounds.end:  # a whole hour (windows)
                    busy_whole += round_hour_figure(busy, BUSY_QUANTUM)
                    energy_whole += round_hour_figure(
                        Fraction(energy_mj_s, 60 * MJ_PER_KWH), ENERGY_QUANTUM
                    )
                else:
                    partial.append(PartialHour(hour, busy, energy_mj_s))
                    plain_seconds = None
                    whole_hours = False
            cells.append(
                Cell(
                    interval=bounds,
                    in_service=in_service,
                    maintenance=maintenance,
                    incident=incident,
                    operator_incident=operator,
                    telemetry_up_s=up,
                    telemetry_down_s=down,
                    whole_busy_pct_s=busy_whole,
                    whole_energy_kwh=energy_whole,
                    partial=tuple(partial),
                )
            )
        # Cut in time order.
        usages[group][fact.gpu_id] = CellUsage.of_sorted(
            cells,
            plain_seconds=plain_seconds,
            json_template=shape.json_template if whole_hours else None,
        )
    return usages


Rows = list[tuple[Any, ...]]
# Up to this many cells and partial-hour ranges (one owner's redraft, a series), they go to the
# queries as arrays, all three queries in one round trip, no transaction: a temp table costs
# more round trips (create, two COPYs, ANALYZE, a commit that drops it) than the queries.
FEW_ROWS = 500


def _many_sums(
    cell_rows: Rows, range_rows: Rows, common: tuple[datetime, datetime] | None, use_rollups: bool
) -> tuple[Rows, Rows]:
    """The cells' whole-hour sums and their partial hours' pieces, through temp tables."""
    whole_rows: Rows = []
    piece_rows: Rows = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(_TEMP)
        raw = cursor.cursor
        with raw.copy(
            "COPY billing_usage_cell (idx, gpu_id, lo, hi, h0, h1, common) FROM STDIN"
        ) as copy:
            for row in cell_rows:
                copy.write_row(row)
        with raw.copy("COPY billing_usage_range (idx, gpu_id, lo, hi) FROM STDIN") as copy:
            for row in range_rows:
                copy.write_row(row)
        cursor.execute("ANALYZE billing_usage_cell; ANALYZE billing_usage_range")
        if use_rollups and cell_rows:
            others = sum(1 for row in cell_rows if row[4] < row[5] and not row[6])
            cursor.execute(_ROLLUP_WHOLE_HOURS_FEW if others <= FEW_CELLS else _ROLLUP_WHOLE_HOURS)
            whole_rows = list(cursor.fetchall())
            if common is not None:
                gpus = sorted({row[1] for row in cell_rows if row[6]})
                if len(gpus) <= FEW_COMMON_GPUS:
                    cursor.execute(
                        _ROLLUP_COMMON_HOURS_FEW_GPUS,
                        {"h0": common[0], "h1": common[1], "gpus": gpus},
                    )
                else:
                    cursor.execute(_ROLLUP_COMMON_HOURS, {"h0": common[0], "h1": common[1]})
                whole_rows += cursor.fetchall()
        if range_rows:
            cursor.execute(_WINDOW_PIECES)
            piece_rows = list(cursor.fetchall())
    return whole_rows, piece_rows


# The few-rows forms of the temp tables: the same columns, from array parameters.
_CELLS_OF_ARRAYS = """(SELECT * FROM unnest(%(c_idx)s::integer[], %(c_gpu)s::uuid[],
    %(c_h0)s::timestamptz[], %(c_h1)s::timestamptz[], %(c_common)s::boolean[])
    AS u(idx, gpu_id, h0, h1, common)) c"""
_RANGES_OF_ARRAYS = """(SELECT * FROM unnest(%(r_idx)s::integer[], %(r_gpu)s::uuid[],
    %(r_lo)s::timestamptz[], %(r_hi)s::timestamptz[]) AS u(idx, gpu_id, lo, hi)) r"""


def _few_sums(
    cell_rows: Rows, range_rows: Rows, common: tuple[datetime, datetime] | None, use_rollups: bool
) -> tuple[Rows, Rows]:
    """``_many_sums`` for a few cells: the same queries over the cells and ranges given as
    arrays, sent together."""
    statements = []
    if use_rollups and cell_rows:
        statements.append(_ROLLUP_WHOLE_HOURS_FEW.replace("billing_usage_cell c", _CELLS_OF_ARRAYS))
        if common is not None:
            statements.append(
                _ROLLUP_COMMON_HOURS_FEW_GPUS.replace("billing_usage_cell c", _CELLS_OF_ARRAYS)
            )
    if range_rows:
        statements.append(_WINDOW_PIECES.replace("billing_usage_range r", _RANGES_OF_ARRAYS))
    if not statements:
        return [], []
    c_idx, c_gpu, _, _, c_h0, c_h1, c_common = (
        (list(col) for col in zip(*cell_rows, strict=True)) if cell_rows else ([],) * 7
    )
    r_idx, r_gpu, r_lo, r_hi = (
        (list(col) for col in zip(*range_rows, strict=True)) if range_rows else ([],) * 4
    )
    params = {
        "c_idx": c_idx, "c_gpu": c_gpu, "c_h0": c_h0, "c_h1": c_h1, "c_common": c_common,
        "r_idx": r_idx, "r_gpu": r_gpu, "r_lo": r_lo, "r_hi": r_hi,
        "h0": common[0] if common else None, "h1": common[1] if common else None,
        "gpus": sorted({row[1] for row in cell_rows if row[6]}),
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(";\n".join(statements), params)
        results = [list(cursor.fetchall())]
        while cursor.nextset():
            results.append(list(cursor.fetchall()))
    piece_rows = results.pop() if range_rows else []
    return [row for rows in results for row in rows], piece_rows


# A GPU without any daily rollup, summed.
NO_SUMS = (0, 0, Decimal(0), Decimal(0))


def _tail(day: DayText) -> CellTail:
    """A day's figures as the day sums hand them over, as its cell's tail."""
    up, down, busy, energy = day
    return (up, down, Decimal(busy), Decimal(energy), ())


def _day_run(shape: _Shape, position: dict[datetime, int]) -> slice | None:
    """Where a shape's cells lie among the day sums' days, when every one of them is a whole
    day, without partial hours, and they follow one another there; else None."""
    days = shape.days_at
    if not days or shape.partial_days or any(day is None for day in days):
        return None
    first, last = position.get(days[0]), position.get(days[-1])  # type: ignore[arg-type]
    if first is None or last is None or last - first != len(days) - 1:
        return None
    return slice(first, last + 1)


_MINUTES = f"""
SELECT w.gpu_id, w.window_start, w.state, w.util_gpu_avg::numeric, d.delta_mj,
       w.observed_from, w.observed_to
  FROM telemetry_window w
  {_DELTA}
 WHERE w.gpu_id = ANY(%(gpus)s) AND w.window_start > %(start)s - interval '60 seconds'
   AND w.window_start < %(end)s
 ORDER BY w.gpu_id, w.window_start
"""  # noqa: S608 - constants only, no input


def timeline_load(*, facts: Sequence[GpuFacts]) -> dict[uuid.UUID, GpuTimeline]:
    """The reference: every telemetry minute of each GPU, as ``GpuTimeline``."""
    if not facts:
        return {}
    start = min(f.range.start for f in facts)
    end = max(f.range.end for f in facts)
    minutes: dict[uuid.UUID, list[TelemetryMinute]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(_MINUTES, {"gpus": [f.gpu_id for f in facts], "start": start, "end": end})
        for gpu_id, window_start, state, util, delta_mj, seen_from, seen_to in cursor.fetchall():
            minutes[gpu_id].append(
                TelemetryMinute(
                    start=window_start,
                    state=state,
                    util_avg=util,
                    energy_kwh=Decimal(delta_mj) / MJ_PER_KWH,
                    energy_mj=int(delta_mj),
                    observed_from=seen_from,
                    observed_to=seen_to,
                )
            )
    return {
        f.gpu_id: GpuTimeline(
            in_service=f.in_service,
            minutes=minutes[f.gpu_id],
            maintenance=f.maintenance,
            incidents=f.incidents,
            operator_incidents=f.operator_incidents,
        )
        for f in facts
    }

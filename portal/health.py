"""Reads for a GPU's health on its portal page: its newest reading, driver, XID and loss events,
ECC errors by day and remapped-row changes.

Every read is limited to the time the user's accounts held the GPU (``holding_spans``), as the
page's figures are: a former owner sees the card's history up to their sale, not after it.
Telemetry is read through its models and the GPU's holdings through ``portal.access``; XID
names and severities come from the agent's one classification table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.db.models.functions import TruncDay

from accounts.models import User
from fleet.models import Gpu, Placement
from portal.access import holdings_for_user
from telemetry.agent.xid import classify_xid
from telemetry.models import NodeStatus, TelemetryEvent

EVENT_KINDS = (
    TelemetryEvent.Kind.XID,
    TelemetryEvent.Kind.GPU_LOST,
    TelemetryEvent.Kind.GPU_RECOVERED,
    TelemetryEvent.Kind.GPU_MISSING,
    TelemetryEvent.Kind.GPU_APPEARED,
)
EVENTS_SHOWN = 50
# What an XID's severity means for the GPU (telemetry.agent.xid), in the owner's words.
SEVERITY_TEXT = {
    "down": "GPU stopped: cannot run work until reset",
    "degraded": "GPU degraded: still works, a reset is due",
    "app": "the application failed; the GPU is fine",
    "info": "information only",
    "unknown": "not classified; changes no state",
}


@dataclass(frozen=True)
class Reading:
    """The GPU's newest telemetry window in the span: its counters as the driver reported
    them (None: not reported)."""

    at: datetime  # the end of the seconds the window observed
    node: str
    ecc_corrected: int | None
    ecc_uncorrected: int | None
    remapped_correctable: int | None
    remapped_uncorrectable: int | None
    remapped_pending: bool | None
    retired_pages: int | None
    pcie_replays: int | None
    temp_max_c: float | None
    power_avg_w: float | None


@dataclass(frozen=True)
class HealthEvent:
    occurred_at: datetime
    kind: str
    label: str  # "XID 79: GPU has fallen off the bus", "GPU lost"
    severity: str  # down / degraded / app / info / unknown; "" for losses and recoveries
    meaning: str


@dataclass(frozen=True)
class ErrorDay:
    """A UTC day with XID events or ECC errors: the increases of the driver's counters from
    one window to the next (a counter that went back was reset: its new value is the
    increase), over the windows the user held."""

    day: datetime
    xid_events: int
    ecc_corrected: int
    ecc_uncorrected: int


@dataclass(frozen=True)
class RemapChange:
    """A window whose remapped-row counts differ from the window before it (the first
    reading of the span has ``before`` None)."""

    at: datetime
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    before: tuple[int | None, int | None, bool | None] | None


@dataclass(frozen=True)
class GpuHealth:
    reading: Reading | None
    driver_version: str
    agent_version: str
    events: list[HealthEvent]
    events_total: int
    error_days: list[ErrorDay]
    remaps: list[RemapChange]

    @property
    def findings(self) -> list[str]:
        """What an owner should notice, each in one sentence; empty when nothing stands out."""
        out: list[str] = []
        r = self.reading
        if r is not None and r.remapped_pending:
            out.append("A memory row remap is pending: it takes effect at the GPU's next reset.")
        if r is not None and r.remapped_uncorrectable:
            out.append(
                f"{r.remapped_uncorrectable} memory row(s) remapped after uncorrectable errors."
            )
        uncorrected = sum(d.ecc_uncorrected for d in self.error_days)
        if uncorrected:
            out.append(f"{uncorrected} uncorrectable ECC error(s) in the last 30 days.")
        stopped = sum(1 for e in self.events if e.severity == "down" or e.kind == "gpu_lost")
        if stopped:
            out.append(f"{stopped} event(s) that stopped the GPU (of the {EVENTS_SHOWN} newest).")
        return out


def holding_spans(*, user: User, gpu: Gpu, now: datetime) -> list[tuple[datetime, datetime]]:
    """When the user's accounts held the GPU, up to ``now``, merged where they touch."""
    rows = sorted(
        (o.valid_from, min(o.valid_to or now, now))
        for o in holdings_for_user(user=user).filter(gpu=gpu, valid_from__lt=now)
    )
    spans: list[tuple[datetime, datetime]] = []
    for start, end in rows:
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        elif end > start:
            spans.append((start, end))
    return spans


def _in_spans(field: str, spans: list[tuple[datetime, datetime]]) -> Q:
    q = Q(pk__in=[])
    for start, end in spans:
        q |= Q(**{f"{field}__gte": start, f"{field}__lt": end})
    return q


def _clip(
    spans: list[tuple[datetime, datetime]], start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    return [(max(a, start), min(b, end)) for a, b in spans if a < end and b > start]


# Windows of one GPU inside the spans (arrays of starts and ends), by the (gpu, window_start)
# key: the planner prunes the day partitions outside [first start, last end).
_SPANS = """EXISTS (SELECT 1 FROM unnest(%(starts)s::timestamptz[], %(ends)s::timestamptz[]) h(s, e)
                 WHERE {w}.window_start >= h.s AND {w}.window_start < h.e)"""


def _increase(column: str) -> str:
    return (
        f"CASE WHEN x.p{column} IS NULL OR x.{column} IS NULL THEN 0 "
        f"WHEN x.{column} >= x.p{column} THEN x.{column} - x.p{column} ELSE x.{column} END"
    )


# Each window's counters against the window before it in the whole range (held or not), so
# the first held window's increase is measured from the reading just before the holding.
_ECC = f"""
SELECT date_trunc('day', x.window_start, 'UTC'), sum({_increase("c")}), sum({_increase("u")})
  FROM (SELECT w.window_start, w.ecc_corrected AS c, w.ecc_uncorrected AS u,
               lag(w.ecc_corrected) OVER o AS pc, lag(w.ecc_uncorrected) OVER o AS pu
          FROM telemetry_window w
         WHERE w.gpu_id = %(gpu)s AND w.window_start >= %(since)s AND w.window_start < %(last)s
           AND (w.ecc_corrected IS NOT NULL OR w.ecc_uncorrected IS NOT NULL)
        WINDOW o AS (ORDER BY w.window_start)) x
 WHERE {_SPANS.format(w="x")}
 GROUP BY 1
"""  # noqa: S608 - constants only

_NEWEST = f"""
SELECT w.window_start + w.observed_to * interval '1 second', n.hostname, w.node_id,
       w.ecc_corrected, w.ecc_uncorrected, w.remapped_rows_correctable,
       w.remapped_rows_uncorrectable, w.remapped_rows_pending, w.retired_pages, w.pcie_replays,
       w.temp_max_c, w.power_avg_w
  FROM telemetry_window w JOIN fleet_node n ON n.id = w.node_id
 WHERE w.gpu_id = %(gpu)s AND w.window_start >= %(first)s AND w.window_start < %(last)s
   AND {_SPANS.format(w="w")}
 ORDER BY w.window_start DESC LIMIT 1
"""  # noqa: S608 - constants only

_REMAPS = f"""
SELECT at, c, u, p, pc, pu, pp, rn FROM (
  SELECT w.window_start + w.observed_to * interval '1 second' AS at,
         w.remapped_rows_correctable AS c, w.remapped_rows_uncorrectable AS u,
         w.remapped_rows_pending AS p,
         lag(w.remapped_rows_correctable) OVER o AS pc,
         lag(w.remapped_rows_uncorrectable) OVER o AS pu,
         lag(w.remapped_rows_pending) OVER o AS pp,
         row_number() OVER o AS rn
    FROM telemetry_window w
   WHERE w.gpu_id = %(gpu)s AND w.window_start >= %(first)s AND w.window_start < %(last)s
     AND {_SPANS.format(w="w")}
     AND (w.remapped_rows_correctable IS NOT NULL OR w.remapped_rows_uncorrectable IS NOT NULL
          OR w.remapped_rows_pending IS NOT NULL)
  WINDOW o AS (ORDER BY w.window_start)) x
 WHERE rn = 1 OR c IS DISTINCT FROM pc OR u IS DISTINCT FROM pu OR p IS DISTINCT FROM pp
 ORDER BY at DESC
"""  # noqa: S608 - constants only


def gpu_health(*, user: User, gpu: Gpu, start: datetime, end: datetime, now: datetime) -> GpuHealth:
    """The GPU's health as the user may see it: readings, error days and remapped-row changes
    in ``[start, end)`` (the page's 30 days), XID and loss events from any time the user's
    accounts held it (the newest ``EVENTS_SHOWN``)."""
    spans = holding_spans(user=user, gpu=gpu, now=now)
    recent = _clip(spans, start, end)
    reading, node_id = _newest(gpu=gpu, spans=recent)
    if node_id is None:  # no reading: the node it is placed on now, if any
        placed = Placement.objects.filter(gpu=gpu, valid_to__isnull=True).first()
        node_id = placed.node_id if placed else None
    status = NodeStatus.objects.filter(node_id=node_id).first() if node_id else None
    events = TelemetryEvent.objects.filter(_in_spans("occurred_at", spans), gpu=gpu).filter(
        kind__in=EVENT_KINDS
    )
    return GpuHealth(
        reading=reading,
        driver_version=status.driver_version if status else "",
        agent_version=status.agent_version if status else "",
        events=[_event(e) for e in events.order_by("-occurred_at", "-pk")[:EVENTS_SHOWN]],
        events_total=events.count(),
        error_days=_error_days(gpu=gpu, spans=recent, since=start),
        remaps=_remaps(gpu=gpu, spans=recent),
    )


def _params(gpu: Gpu, spans: list[tuple[datetime, datetime]]) -> dict[str, Any]:
    return {
        "gpu": gpu.pk,
        "first": spans[0][0],
        "last": spans[-1][1],
        "starts": [a for a, _ in spans],
        "ends": [b for _, b in spans],
    }


def _newest(*, gpu: Gpu, spans: list[tuple[datetime, datetime]]) -> tuple[Reading | None, Any]:
    if not spans:
        return None, None
    with connection.cursor() as cursor:
        cursor.execute(_NEWEST, _params(gpu, spans))
        row = cursor.fetchone()
    if row is None:
        return None, None
    at, hostname, node_id, *values = row
    return Reading(at.astimezone(UTC), hostname, *values), node_id


def _event(e: TelemetryEvent) -> HealthEvent:
    if e.kind == TelemetryEvent.Kind.XID and e.xid is not None:
        info = classify_xid(e.xid)
        return HealthEvent(
            occurred_at=e.occurred_at,
            kind=e.kind,
            label=f"XID {e.xid}: {info.name}",
            severity=info.severity,
            meaning=SEVERITY_TEXT[info.severity],
        )
    meaning = {
        TelemetryEvent.Kind.GPU_LOST: "the driver lost the GPU: it cannot run work",
        TelemetryEvent.Kind.GPU_MISSING: "the GPU was not found on its node",
        TelemetryEvent.Kind.GPU_RECOVERED: "the driver has the GPU back",
        TelemetryEvent.Kind.GPU_APPEARED: "the GPU was found on its node again",
    }.get(TelemetryEvent.Kind(e.kind), "")
    return HealthEvent(e.occurred_at, e.kind, e.get_kind_display(), "", meaning)


def _error_days(
    *, gpu: Gpu, spans: list[tuple[datetime, datetime]], since: datetime
) -> list[ErrorDay]:
    """Days with XIDs or ECC errors in the held spans, newest first."""
    if not spans:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_ECC, {**_params(gpu, spans), "since": since})
        ecc = {day: (int(c), int(u)) for day, c, u in cursor.fetchall()}
    xids = dict(
        TelemetryEvent.objects.filter(
            _in_spans("occurred_at", spans), gpu=gpu, kind=TelemetryEvent.Kind.XID
        )
        .annotate(day=TruncDay("occurred_at", tzinfo=UTC))
        .values("day")
        .annotate(n=Count("pk"))
        .values_list("day", "n")
    )
    days = sorted(set(ecc) | set(xids), reverse=True)
    out = [ErrorDay(day, xids.get(day, 0), *ecc.get(day, (0, 0))) for day in days]
    return [d for d in out if d.xid_events or d.ecc_corrected or d.ecc_uncorrected]


def _remaps(*, gpu: Gpu, spans: list[tuple[datetime, datetime]]) -> list[RemapChange]:
    if not spans:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_REMAPS, _params(gpu, spans))
        rows = cursor.fetchall()
    return [
        RemapChange(
            at=at.astimezone(UTC),
            correctable=c,
            uncorrectable=u,
            pending=p,
            before=None if rn == 1 else (pc, pu, pp),
        )
        for at, c, u, p, pc, pu, pp, rn in rows
    ]

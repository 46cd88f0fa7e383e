"""Reads for operators, billing, the portal and the API: ingest health at a glance, without
scanning telemetry tables; whether the derived rows (transitions, rollups) of a range are up to
date; how nodes measured utilization and how much of each minute they observed; and what the
telemetry says of a GPU over a range or now, never beyond its data."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from telemetry.models import (
    BatchStatus,
    GpuState,
    IngestBatch,
    NodeCredential,
    NodeStatus,
    RejectedRecord,
    TelemetryWindow,
    UtilMethod,
)
from telemetry.services.derived import WINDOW

# The health view counts waiting marks up to this many (a catch-up can leave millions).
DERIVED_COUNT_CAP = 100_000


def batches_with_status(batches: QuerySet[IngestBatch], status: str) -> QuerySet[IngestBatch]:
    """The batches of ``batches`` in ``status``. Pending and failed ones are found through
    their queue rows (a small table with its own index): no index covers ``status`` on the
    batch table, which is what keeps the worker's update of it HOT."""
    if status == BatchStatus.PENDING:
        return batches.filter(queued__failed=False)
    if status == BatchStatus.FAILED:
        return batches.filter(queued__failed=True)
    return batches.filter(status=status)


@dataclass(frozen=True)
class IngestHealth:
    pending: int  # not yet processed, in flight included
    in_flight: int  # pending batches a running worker holds (in its chunk's transaction)
    failed: int
    oldest_pending_at: dt.datetime | None
    lag_s: float
    stale_nodes: list[NodeStatus]  # the most recently stale ones, at most ``nodes`` of them
    nodes: list[NodeStatus]
    recent_rejections: list[RejectedRecord]
    rejections_by_reason: list[tuple[str, int]]
    derived_pending: int = 0
    derived_pending_capped: bool = False
    derived_oldest_at: dt.datetime | None = None
    derived_lag_s: float = 0.0
    workers: list[tuple[str, int, dt.datetime]] = field(default_factory=list)
    # Claims of workers lost mid-chunk, not yet reaped (the next claim counts their attempts).
    abandoned_claims: int = 0
    stale_count: int = 0  # every stale node, however many are listed


def ingest_health(*, now: dt.datetime, nodes: int = 50, rejections: int = 50) -> IngestHealth:
    """Counts come from the queue of unprocessed batches, so they stay cheap however many
    batches have been processed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE NOT failed), min(received_at) FILTER (WHERE NOT failed),"
            " count(*) FILTER (WHERE failed) FROM telemetry_queuedbatch"
        )
        pending, oldest, failed = cursor.fetchone() or (0, None, 0)
        # A claim row is live while its chunk's transaction holds it: the rows this cannot
        # lock (KEY SHARE conflicts only with that transaction's FOR UPDATE) are live, the
        # others belong to lost workers. Claim rows are few (one per running chunk).
        cursor.execute("SELECT id FROM telemetry_ingestclaim FOR KEY SHARE SKIP LOCKED")
        abandoned = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            "SELECT id, worker, cardinality(batch_ids), claimed_at FROM telemetry_ingestclaim "
            "ORDER BY claimed_at"
        )
        workers = [(w, int(n), at) for cid, w, n, at in cursor.fetchall() if cid not in abandoned]
        cursor.execute(
            "SELECT reason, count(*) FROM telemetry_rejectedrecord "
            "WHERE recorded_at >= %s GROUP BY reason ORDER BY 2 DESC",
            [now - dt.timedelta(days=1)],
        )
        by_reason = [(reason, int(count)) for reason, count in cursor.fetchall()]
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM telemetry_derivedwork LIMIT %s) m",
            [DERIVED_COUNT_CAP],
        )
        (derived,) = cursor.fetchone() or (0,)
        cursor.execute("SELECT min(marked_at) FROM telemetry_derivedwork")
        (derived_oldest,) = cursor.fetchone() or (None,)
        # One row per node (~12,500 for 100k GPUs): counted whole, not as the list's length.
        cursor.execute("SELECT count(*) FROM telemetry_nodestatus WHERE stale")
        (stale_count,) = cursor.fetchone() or (0,)
    return IngestHealth(
        pending=int(pending),
        in_flight=sum(n for _, n, _ in workers),
        failed=int(failed),
        oldest_pending_at=oldest,
        lag_s=(now - oldest).total_seconds() if oldest else 0.0,
        stale_nodes=list(
            NodeStatus.objects.filter(stale=True)
            .select_related("node")
            .order_by("-stale_since")[:nodes]
        ),
        nodes=list(NodeStatus.objects.select_related("node").order_by("last_seen_at")[:nodes]),
        recent_rejections=list(
            RejectedRecord.objects.select_related("node").order_by("-recorded_at")[:rejections]
        ),
        rejections_by_reason=by_reason,
        derived_pending=int(derived),
        derived_pending_capped=int(derived) >= DERIVED_COUNT_CAP,
        derived_oldest_at=derived_oldest,
        derived_lag_s=(now - derived_oldest).total_seconds() if derived_oldest else 0.0,
        workers=workers,
        abandoned_claims=len(abandoned),
        stale_count=int(stale_count),
    )


# Windows have no index by node or by time alone (their key is (GPU, minute)), so the two
# console reads below go through the nodes' placed GPUs and that key: a bounded number of
# index range scans, however large the fleet.
# The order the console lists the methods in; None: windows without utilization.
METHODS: tuple[str | None, ...] = (UtilMethod.BUFFER, UtilMethod.MIXED, UtilMethod.INSTANT, None)


@dataclass(frozen=True)
class NodeCoverage:
    """One node's windows in a span: how many, by utilization method, and observed seconds."""

    windows: int
    by_method: dict[str | None, int]
    observed_s: int

    @property
    def coverage(self) -> float:
        """Observed seconds ÷ window seconds (60 per window), in percent."""
        return 100 * self.observed_s / (60 * self.windows) if self.windows else 0.0

    @property
    def shares(self) -> list[tuple[str, float]]:
        """(method, percent of the windows) for each method that occurs, in ``METHODS`` order;
        ``none`` for windows without utilization (down, or not supported)."""
        return [
            (method or "none", 100 * self.by_method[method] / self.windows)
            for method in METHODS
            if self.by_method.get(method)
        ]


def nodes_coverage(
    *, node_ids: list[uuid.UUID], start: dt.datetime, end: dt.datetime
) -> dict[uuid.UUID, NodeCoverage]:
    """For each node that sent windows in ``[start, end)`` (by ``window_start``): the count
    of its windows by utilization method and their observed seconds. Nodes without windows
    there are absent."""
    if not node_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT g.node_id, count(*),
                   count(*) FILTER (WHERE w.util_method = 'buffer'),
                   count(*) FILTER (WHERE w.util_method = 'mixed'),
                   count(*) FILTER (WHERE w.util_method = 'instant'),
                   count(*) FILTER (WHERE w.util_method IS NULL),
                   sum(w.observed_to - w.observed_from)
              FROM (SELECT DISTINCT node_id, gpu_id FROM fleet_placement
                     WHERE node_id = ANY(%(nodes)s) AND valid_from < %(end)s
                       AND (valid_to IS NULL OR valid_to > %(start)s)) g
              JOIN telemetry_window w
                ON w.gpu_id = g.gpu_id AND w.node_id = g.node_id
               AND w.window_start >= %(start)s AND w.window_start < %(end)s
             GROUP BY g.node_id
            """,
            {"nodes": list(node_ids), "start": start, "end": end},
        )
        rows = cursor.fetchall()
    return {
        node_id: NodeCoverage(
            windows=int(count),
            by_method=dict(zip(METHODS, (int(n) for n in counts), strict=True)),
            observed_s=int(observed),
        )
        for node_id, count, *counts, observed in rows
    }


def node_windows(
    *, node_id: uuid.UUID, before: dt.datetime, span: dt.timedelta, limit: int = 240
) -> list[TelemetryWindow]:
    """The node's windows in ``[before - span, before)``, newest first (then by GPU), at most
    ``limit``: what each said, which seconds of its minute it observed and how its
    utilization was measured."""
    start = before - span
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT gpu_id FROM fleet_placement WHERE node_id = %s AND valid_from < %s "
            "AND (valid_to IS NULL OR valid_to > %s)",
            [node_id, before, start],
        )
        gpu_ids = [row[0] for row in cursor.fetchall()]
    if not gpu_ids:
        return []
    return list(
        TelemetryWindow.objects.filter(
            node_id=node_id, gpu_id__in=gpu_ids, window_start__gte=start, window_start__lt=before
        )
        .select_related("gpu")
        .order_by("-window_start", "gpu__serial")[:limit]
    )


def derived_pending(*, start: dt.datetime, end: dt.datetime) -> int:
    """How many (GPU, hour) marks still wait for a derived pass that could change a
    transition or an hourly rollup in ``[start, end)``; 0 means those rows are up to date with
    every window processed so far.

    A late window changes its own hour and, through counter deltas and the state before it,
    the GPU's next window up to ``LOOKAROUND`` later and its next energy reading however
    much later: so every mark before ``end`` counts (marks are work in flight: few). Batches
    not yet processed are not marks yet: a statement close should also see
    ``ingest_health(...).pending == 0`` (or accept the rows as of now, preliminary)."""
    del start  # every earlier mark can reach the range (see above)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM telemetry_derivedwork WHERE hour < %s", [end])
        (count,) = cursor.fetchone() or (0,)
    return int(count)


def node_credential_current(*, node_id: uuid.UUID) -> tuple[int, str] | None:
    """The node's current key (generation, SHA-256), or None when it has none or it was
    revoked. One plain query: on the ingest endpoint's path the ORM's query building cost as
    much as the rest of the lookup."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT generation, key_sha256 FROM {NodeCredential._meta.db_table} "  # noqa: S608
            "WHERE node_id = %s AND revoked_at IS NULL LIMIT 1",
            [node_id],
        )
        row = cursor.fetchone()
    return (int(row[0]), str(row[1])) if row else None


# ---- what the telemetry says of a GPU, never beyond its data ---------------------------------
#
# A transition holds "until the next one", but the telemetry behind an up, degraded or down
# state covers only its windows' observed seconds: after the last window of a run nothing is
# known until a later window (or a no_data transition) arrives. Transitions date gaps between
# windows, and the staleness sweep the end of a node's telemetry, but neither can be relied on
# for the trailing edge (windows still arriving in a backfill, a GPU taken off a node that keeps
# reporting, a sweep that has not run yet). So every reader below ends a run at the last second
# its windows observed, read from the windows themselves.

# The end of the observed span of a GPU's newest window starting in [since - 60 s, before): the
# window that began a state starts at most 60 s before it (a state begins at ws + observed_from).
# One backward probe of the (gpu, window_start) index; the day partitions outside the range are
# pruned at run time.
_SEEN = """(SELECT w.window_start + w.observed_to * interval '1 second' FROM telemetry_window w
  WHERE w.gpu_id = {gpu} AND w.window_start >= {since} - interval '60 seconds'
    AND w.window_start < {before}
  ORDER BY w.window_start DESC LIMIT 1)"""

# Where raw windows are gone (older than TELEMETRY_RAW_RETENTION_DAYS), the newest hourly
# rollup with windows in the run bounds it instead: a run's windows continue one another up to
# its end, so it ends as many observed seconds after the hour began (or after the run began,
# inside that hour) as the rollup counts, within the hour.
_ROLLED = """(SELECT least(r.hour + interval '1 hour', greatest({since}, r.hour)
      + (r.seconds_up + r.seconds_degraded + r.seconds_down) * interval '1 second')
  FROM telemetry_hourlyrollup r
  WHERE r.gpu_id = {gpu} AND r.windows > 0 AND r.hour < {before}
    AND r.hour >= date_trunc('hour', {since} - interval '60 seconds', 'UTC')
  ORDER BY r.hour DESC LIMIT 1)"""


def _coverage_sql(*, gpu: str, since: str, before: str, state: str) -> str:
    """Two lateral joins giving ``cw.seen`` (from the windows) and ``cr.rolled`` (from the
    rollups, read only for an up, degraded or down run whose windows are gone)."""
    seen = _SEEN.format(gpu=gpu, since=since, before=before)
    rolled = _ROLLED.format(gpu=gpu, since=since, before=before)
    # OFFSET 0 keeps each a subquery evaluated once per row: pulled up into the outer query,
    # its probe would be repeated wherever the outer query names its column.
    return (
        f"CROSS JOIN LATERAL (SELECT {seen} AS seen OFFSET 0) cw "
        f"CROSS JOIN LATERAL (SELECT CASE WHEN cw.seen IS NULL AND {state} <> 'no_data' "
        f"THEN {rolled} END AS rolled OFFSET 0) cr"
    )


def state_fresh_for() -> dt.timedelta:
    """How long after the last second its telemetry covers a GPU is still in that state "now":
    the staleness rule's ``TELEMETRY_STALE_AFTER_WINDOWS`` minutes (a live agent sends each
    window once its minute is over, so the newest one always ends a little before now)."""
    return WINDOW * settings.TELEMETRY_STALE_AFTER_WINDOWS


def state_now_join(*, gpu: str, now: str, alias: str, fresh_for: dt.timedelta) -> str:
    """SQL joining, for the GPU whose id is the expression ``gpu``, its telemetry state at
    ``now`` (an SQL expression, used once) as ``{alias}.state``, ``{alias}.since`` and
    ``{alias}.last_seen`` (all null before any transition). See ``gpu_states_now``."""
    fresh = f"interval '{int(fresh_for.total_seconds())} seconds'"
    coverage = _coverage_sql(gpu=gpu, since="t.at", before="n.now", state="t.state")
    stale = (
        f"(coalesce(cw.seen, cr.rolled) IS NULL OR coalesce(cw.seen, cr.rolled) < n.now - {fresh})"
    )
    return f"""LEFT JOIN LATERAL (
  SELECT CASE WHEN t.state = 'no_data' OR {stale} THEN 'no_data' ELSE t.state END AS state,
         CASE WHEN t.state <> 'no_data' AND {stale}
              THEN coalesce(cw.seen, cr.rolled, t.at) ELSE t.at END AS since,
         coalesce(cw.seen, cr.rolled, CASE WHEN t.state = 'no_data' THEN t.at END) AS last_seen
    FROM (SELECT {now}::timestamptz AS now) n
   CROSS JOIN LATERAL (SELECT x.state, x.at FROM telemetry_gpustatetransition x
                        WHERE x.gpu_id = {gpu} AND x.at <= n.now
                        ORDER BY x.at DESC LIMIT 1) t
   {coverage}) {alias} ON true"""  # noqa: S608 - fixed SQL; the GPU and now are expressions


@dataclass(frozen=True)
class StateNow:
    """A GPU's telemetry state at an instant. ``since``: when it began (for no_data after a
    run, the last second the run covered). ``last_seen``: the end of the last second its
    telemetry covers (None: never any)."""

    state: str
    since: dt.datetime | None
    last_seen: dt.datetime | None


NO_TELEMETRY = StateNow(state=GpuState.NO_DATA, since=None, last_seen=None)


def gpu_states_now(*, gpu_ids: Sequence[uuid.UUID], now: dt.datetime) -> dict[uuid.UUID, StateNow]:
    """Each GPU's telemetry state at ``now``, in one query (a few index probes per GPU).

    The state of its newest transition, if the telemetry still covers a second no more than
    ``state_fresh_for()`` before ``now``; otherwise ``no_data`` since the last second it covered.
    GPUs without any transition are absent (no telemetry yet: ``NO_TELEMETRY``)."""
    if not gpu_ids:
        return {}
    join = state_now_join(gpu="g.id", now="%(now)s", alias="s", fresh_for=state_fresh_for())
    sql = f"SELECT g.id, s.state, s.since, s.last_seen FROM unnest(%(ids)s::uuid[]) g(id) {join}"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": list(gpu_ids), "now": now})
        return {
            gpu_id: StateNow(state=state, since=since, last_seen=last_seen)
            for gpu_id, state, since, last_seen in cursor.fetchall()
            if state is not None
        }


# Runs of each GPU over [start, end): the transition in force at start (one probe per GPU) and
# those inside, each up, degraded or down one ended at its next transition or at the end of
# the telemetry it covers, whichever comes first; one with no telemetry at all is dropped.
_RUNS = f"""
WITH s AS (
  SELECT x.gpu_id, x.at, x.state,
         coalesce(lead(x.at) OVER (PARTITION BY x.gpu_id ORDER BY x.at), %(end)s) AS next_at
    FROM (SELECT b.gpu_id, b.at, b.state
            FROM unnest(%(ids)s::uuid[]) AS g(id)
           CROSS JOIN LATERAL (SELECT t.gpu_id, t.at, t.state
                                 FROM telemetry_gpustatetransition t
                                WHERE t.gpu_id = g.id AND t.at < %(start)s
                                ORDER BY t.at DESC LIMIT 1) b
          UNION ALL
          SELECT t.gpu_id, t.at, t.state FROM telemetry_gpustatetransition t
           WHERE t.gpu_id = ANY(%(ids)s::uuid[]) AND t.at >= %(start)s AND t.at < %(end)s) x
)
SELECT s.gpu_id, s.state, greatest(s.at, %(start)s),
       least(s.next_at, coalesce(cw.seen, cr.rolled))
  FROM (SELECT * FROM s WHERE s.state <> 'no_data') s
  {_coverage_sql(gpu="s.gpu_id", since="s.at", before="s.next_at", state="s.state")}
 WHERE coalesce(cw.seen, cr.rolled) > greatest(s.at, %(start)s)
   AND s.next_at > %(start)s
 ORDER BY s.gpu_id, s.at
"""  # noqa: S608 - constants only, no input


@dataclass(frozen=True)
class TelemetryRun:
    """Part of ``[start, end)`` the telemetry says a GPU was ``state`` (up, degraded or down)."""

    state: str
    start: dt.datetime
    end: dt.datetime


def gpu_telemetry_runs(
    *, gpu_ids: Sequence[uuid.UUID], start: dt.datetime, end: dt.datetime
) -> dict[uuid.UUID, list[TelemetryRun]]:
    """Per GPU, oldest first, the runs of up, degraded or down the telemetry says within
    ``[start, end)``, in one query whatever the number of GPUs. A run ends at the next
    transition or at the last second its windows observed, whichever is first: every other
    second is no_data (nothing is carried forward beyond the data)."""
    out: dict[uuid.UUID, list[TelemetryRun]] = {}
    if not gpu_ids or start >= end:
        return out
    with connection.cursor() as cursor:
        cursor.execute(_RUNS, {"ids": list(gpu_ids), "start": start, "end": end})
        for gpu_id, state, begins, ends in cursor.fetchall():
            out.setdefault(gpu_id, []).append(TelemetryRun(state, begins, min(ends, end)))
    return out

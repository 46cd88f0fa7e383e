"""``gpu.state_changed`` webhook events for transitions a bulk statement just wrote.

Called inside the transaction that wrote the transitions, right after it: one INSERT … SELECT
turns every transition this transaction wrote (``recorded_at = now()``, the transaction's
start) within ``scope`` into an event for the owners holding the GPU at that instant. The
derived pass rewrites transitions it recomputes; the dedupe key (GPU, instant, state) makes
a transition that comes back unchanged no new event.
"""

from __future__ import annotations

from typing import Any

from webhooks.outbox import events_emit_select

# Joins restricting the transitions looked at to those the caller's statement could write.
# A transition is dated where its window begins observing, which may be inside the minute
# of n (the island's next window): up to n_at, not n.
ISLANDS = """
JOIN telemetry_islands t ON t.gpu_id = s.gpu_id
 AND s.at >= coalesce(t.p, t.lo) AND s.at <= coalesce(t.n_at, t.hi)
"""
STALE_GPUS = "JOIN unnest(%(stale_gpus)s::uuid[]) AS x(gpu_id) ON x.gpu_id = s.gpu_id"

_SELECT = """
SELECT 'gpu.state_changed', h.owner_ids,
       jsonb_build_object(
           'gpu', jsonb_build_object('id', g.id, 'serial', g.serial, 'nvml_uuid', g.nvml_uuid),
           'state', s.state, 'reason', s.reason,
           'at', to_char(s.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
       '{{}}'::jsonb,
       'gpu.state_changed:' || s.gpu_id || ':' || s.state || ':'
           || to_char(s.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
  FROM telemetry_gpustatetransition s {scope}
  JOIN fleet_gpu g ON g.id = s.gpu_id
 CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(DISTINCT o.owner_id), '{{}}') AS owner_ids
          FROM fleet_ownership o
         WHERE o.gpu_id = s.gpu_id AND o.valid_from <= s.at
           AND (o.valid_to IS NULL OR o.valid_to > s.at)) AS h
 WHERE s.recorded_at = now()
"""


def gpu_state_events_emit(*, cursor: Any, scope: str, params: dict[str, Any] | None = None) -> int:
    """Writes the events (one statement); ``scope`` is ``ISLANDS`` or ``STALE_GPUS``."""
    return events_emit_select(
        cursor=cursor, select=_SELECT.format(scope=scope), params=params or {}
    )

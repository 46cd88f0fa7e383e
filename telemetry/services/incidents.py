"""Incidents from events: the derived pass opens draft incidents and resolves them.

Run inside the derived pass, after it has rewritten the transitions of the GPUs it claimed
(``telemetry_islands`` holds their ranges), so it sees exactly what the pass just derived:

* **Open.** An event on one of those GPUs, dated from ``LOOKAROUND`` before a claimed range to
  its end, that says the GPU cannot run work — an XID whose severity in the server's table
  (``telemetry.agent.xid``, not the severity the agent sent) is ``down``, or ``gpu_lost`` /
  ``gpu_missing`` — opens a draft incident on that GPU linked to the event, unless the event
  or its trouble is already in hand (``fleet.services.operations.incident_draft_blocked``).
  Events that mark no hour themselves (a lost GPU) are still seen: the GPU's down windows
  mark the hours after them.
* **Resolve.** An open draft, or an incident opened from an event and not yet ended, on one of
  those GPUs is resolved at the GPU's first transition to ``up`` or ``degraded`` after it
  started (the states accounting counts as up). A draft records it; an incident is closed.

Both are idempotent: an event opens at most one draft (unique link), and a recomputed pass
finds nothing new to do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from fleet.models import Gpu, Incident, IncidentDraft
from fleet.services import operations
from telemetry.agent.xid import classify_xid, xid_table

log = logging.getLogger(__name__)

LOST_KINDS = ("gpu_lost", "gpu_missing")
DOWN_XIDS = sorted(info.code for info in xid_table() if info.severity == "down")
RECOVERED_STATES = ("up", "degraded")

_TRIGGERS = """
SELECT DISTINCT e.id, e.gpu_id, e.kind, e.xid, e.occurred_at, e.detail
  FROM telemetry_islands t
  JOIN telemetry_telemetryevent e ON e.gpu_id = t.gpu_id
   AND e.occurred_at >= t.lo - %(around)s AND e.occurred_at < t.hi
 WHERE (e.kind = ANY(%(lost)s) OR (e.kind = 'xid' AND e.xid = ANY(%(xids)s)))
   AND NOT EXISTS (SELECT 1 FROM fleet_incidentdraft d WHERE d.telemetry_event_id = e.id)
   AND NOT EXISTS (SELECT 1 FROM fleet_incident i WHERE i.telemetry_event_id = e.id)
 ORDER BY e.gpu_id, e.occurred_at, e.id
"""

# The first up (or degraded) transition after each open draft / event-opened incident began.
_RECOVERIES = """
SELECT x.kind, x.id, r.at
  FROM (SELECT 'draft' AS kind, d.id, d.gpu_id, d.started_at FROM fleet_incidentdraft d
         WHERE d.status = 'open' AND d.recovered_at IS NULL
         UNION ALL
        SELECT 'incident', i.id, i.gpu_id, i.started_at FROM fleet_incident i
         WHERE i.ended_at IS NULL AND i.telemetry_event_id IS NOT NULL AND i.gpu_id IS NOT NULL
       ) x
 CROSS JOIN LATERAL (
        SELECT s.at FROM telemetry_gpustatetransition s
         WHERE s.gpu_id = x.gpu_id AND s.at > x.started_at AND s.state = ANY(%(states)s)
         ORDER BY s.at LIMIT 1) r
 WHERE x.gpu_id IN (SELECT gpu_id FROM telemetry_islands)
 ORDER BY x.started_at, x.id
"""


@dataclass
class IncidentsResult:
    opened: int = 0  # drafts opened
    resolved: int = 0  # drafts marked recovered and incidents closed


def event_title(*, kind: str, xid: int | None, detail: dict[str, Any] | str) -> str:
    """What an operator reads first: the XID's name from the server's table, or the loss."""
    if kind == "xid" and xid is not None:
        return f"XID {xid}: {classify_xid(xid).name}"
    if isinstance(detail, str):  # Django's connection hands jsonb over as text
        detail = json.loads(detail)
    reason = detail.get("reason") if isinstance(detail, dict) else None
    label = {"gpu_lost": "GPU lost", "gpu_missing": "GPU missing"}.get(kind, kind)
    return f"{label} ({reason})" if reason else label


def incidents_from_events(*, cursor: Any, around: dt.timedelta) -> IncidentsResult:
    """Opens and resolves incidents for the GPUs in ``telemetry_islands`` (see the module)."""
    result = IncidentsResult()
    cursor.execute(_TRIGGERS, {"around": around, "lost": list(LOST_KINDS), "xids": DOWN_XIDS})
    triggers = cursor.fetchall()
    gpus = Gpu.objects.in_bulk({row[1] for row in triggers})
    for event_id, gpu_id, kind, xid, occurred_at, detail in triggers:
        try:
            draft = operations.incident_draft_open(
                gpu=gpus[gpu_id],
                telemetry_event_id=event_id,
                title=event_title(kind=kind, xid=xid, detail=detail),
                occurred_at=occurred_at,
            )
        except ValidationError:
            # One bad row must not stop the pass (it would retry forever): log it, go on.
            log.exception("no draft incident from telemetry event %s", event_id)
            continue
        result.opened += draft is not None
    cursor.execute(_RECOVERIES, {"states": list(RECOVERED_STATES)})
    recoveries = cursor.fetchall()
    drafts = IncidentDraft.objects.in_bulk([i for k, i, _ in recoveries if k == "draft"])
    incidents = Incident.objects.in_bulk([i for k, i, _ in recoveries if k == "incident"])
    for kind, pk, at in recoveries:
        try:
            if kind == "draft":
                operations.incident_draft_recover(draft=drafts[pk], at=at)
            else:
                operations.incident_close(incident=incidents[pk], ended_at=at, by=None)
        except ValidationError:
            log.exception("could not resolve %s %s at %s", kind, pk, at)
            continue
        result.resolved += 1
    return result

"""Maintenance windows (planned) and incidents (unplanned), scoped to a site, cluster, node or
GPU. Which GPUs they affect is resolved at a given instant by ``fleet.selectors``.
Opening and resolving an incident write their webhook events in the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from fleet.models import Cluster, Gpu, Incident, MaintenanceWindow, Node, Site
from fleet.selectors import incident_owner_ids
from fleet.services._common import database_rules, fmt, require_instant, snapshot
from webhooks.models import EventType
from webhooks.outbox import Event, events_emit

Scope = Site | Cluster | Node | Gpu


def _scope_fields(scope: Scope) -> dict[str, Scope | None]:
    fields: dict[str, Scope | None] = {"site": None, "cluster": None, "node": None, "gpu": None}
    key = {Site: "site", Cluster: "cluster", Node: "node", Gpu: "gpu"}.get(type(scope))
    if key is None:
        raise ValidationError({"scope": "Scope is a site, a cluster, a node or a GPU."})
    fields[key] = scope
    return fields


@transaction.atomic
def maintenance_schedule(
    *,
    scope: Scope,
    title: str,
    starts_at: datetime,
    ends_at: datetime,
    announced_at: datetime,
    by: User | None,
    description: str = "",
) -> MaintenanceWindow:
    """Plans a maintenance window over ``[starts_at, ends_at)``, announced at ``announced_at``."""
    starts_at = require_instant(starts_at, field="starts_at")
    ends_at = require_instant(ends_at, field="ends_at")
    announced_at = require_instant(announced_at, field="announced_at")
    if ends_at <= starts_at:
        raise ValidationError({"ends_at": "A maintenance window ends after it starts."})
    if announced_at > starts_at:
        raise ValidationError({"announced_at": "Maintenance is announced before it starts."})
    window = MaintenanceWindow(
        **_scope_fields(scope),
        title=title,
        description=description,
        starts_at=starts_at,
        ends_at=ends_at,
        announced_at=announced_at,
        created_by=by,
    )
    window.full_clean()
    with database_rules():
        window.save()
    audit_log(
        actor=by,
        events=[AuditEvent.of(window, action="maintenance.schedule", after=snapshot(window))],
    )
    return window


@transaction.atomic
def maintenance_cancel(
    *, window: MaintenanceWindow, at: datetime, by: User | None, reason: str
) -> MaintenanceWindow:
    """Cancels a window that has not started; one that has started is ended early instead."""
    at = require_instant(at, field="at")
    window = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
    if window.cancelled_at is not None:
        raise ValidationError({"at": f"{window} was already cancelled."})
    before = {"cancelled_at": None, "ends_at": window.ends_at}
    if at < window.starts_at:
        window.cancelled_at = at
    elif at < window.ends_at:
        window.ends_at = at
    else:
        raise ValidationError(
            {"at": f"{window} ended at {fmt(window.ends_at)}; nothing to cancel."}
        )
    window.save(update_fields=["cancelled_at", "ends_at"])
    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent.of(
                window,
                action="maintenance.cancel",
                before=before,
                after={"cancelled_at": window.cancelled_at, "ends_at": window.ends_at},
            )
        ],
    )
    return window


@transaction.atomic
def incident_open(
    *,
    scope: Scope,
    title: str,
    cause: str,
    started_at: datetime,
    by: User | None,
    notes_for_owners: str = "",
    internal_notes: str = "",
) -> Incident:
    """Records unplanned trouble from ``started_at`` (when it began, not when it was noticed)."""
    started_at = require_instant(started_at, field="started_at")
    incident = Incident(
        **_scope_fields(scope),
        title=title,
        cause=cause,
        started_at=started_at,
        notes_for_owners=notes_for_owners,
        internal_notes=internal_notes,
        opened_by=by,
    )
    incident.full_clean()
    with database_rules():
        incident.save()
    audit_log(
        actor=by,
        events=[AuditEvent.of(incident, action="incident.open", after=snapshot(incident))],
    )
    events_emit(events=[incident_event(incident, EventType.INCIDENT_OPENED)])
    return incident


@transaction.atomic
def incident_close(
    *,
    incident: Incident,
    ended_at: datetime,
    by: User | None,
    notes_for_owners: str | None = None,
) -> Incident:
    """Ends an open incident at ``ended_at``; optionally replaces the owners' notes."""
    ended_at = require_instant(ended_at, field="ended_at")
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.ended_at is not None:
        raise ValidationError(
            {"ended_at": f"Incident {incident} already ended at {fmt(incident.ended_at)}."}
        )
    if ended_at <= incident.started_at:
        raise ValidationError(
            {
                "ended_at": f"Incident {incident} started at {fmt(incident.started_at)}; "
                "it must end after that."
            }
        )
    before = {"ended_at": None, "notes_for_owners": incident.notes_for_owners}
    incident.ended_at = ended_at
    if notes_for_owners is not None:
        incident.notes_for_owners = notes_for_owners
    incident.save(update_fields=["ended_at", "notes_for_owners"])
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                incident,
                action="incident.close",
                before=before,
                after={"ended_at": ended_at, "notes_for_owners": incident.notes_for_owners},
            )
        ],
    )
    events_emit(events=[incident_event(incident, EventType.INCIDENT_RESOLVED)])
    return incident


def incident_event(incident: Incident, event_type: EventType) -> Event:
    """The webhook event of an incident, for the owners whose holdings it touched; what the
    partner API shows of it (never the internal notes)."""
    return Event(
        type=event_type,
        owner_ids=incident_owner_ids(incident=incident),
        data={
            "incident": {
                "id": incident.pk,
                "title": incident.title,
                "cause": incident.cause,
                "started_at": incident.started_at,
                "ended_at": incident.ended_at,
                "status": "open" if incident.ended_at is None else "resolved",
                "notes_for_owners": incident.notes_for_owners,
            }
        },
        dedupe_key=f"{event_type}:{incident.pk}",
    )

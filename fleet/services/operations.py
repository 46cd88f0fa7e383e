"""Maintenance windows (planned) and incidents (unplanned), scoped to a site, cluster, node or
GPU. Which GPUs they affect is resolved at a given instant by ``fleet.selectors``.
Opening and resolving an incident write their webhook events in the same transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from core.inputs import require_instant, require_reason
from core.instants import iso_z
from core.locks import lock, lock_one
from fleet.models import (
    Cluster,
    Gpu,
    Incident,
    IncidentCause,
    IncidentDraft,
    MaintenanceWindow,
    Node,
    Site,
)
from fleet.selectors import incident_owner_ids
from fleet.services._common import (
    database_rules,
    snapshot,
)
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
    window = lock_one(MaintenanceWindow.objects.filter(pk=window.pk))
    if window.cancelled_at is not None:
        raise ValidationError({"at": f"{window} was already cancelled."})
    before = {"cancelled_at": None, "ends_at": window.ends_at}
    if at < window.starts_at:
        window.cancelled_at = at
    elif at < window.ends_at:
        window.ends_at = at
    else:
        raise ValidationError(
            {"at": f"{window} ended at {iso_z(window.ends_at)}; nothing to cancel."}
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
    telemetry_event_id: int | None = None,
) -> Incident:
    """Records unplanned trouble from ``started_at`` (when it began, not when it was noticed).

    ``telemetry_event_id``: the event it was opened from (a confirmed draft); such an incident
    is resolved by the telemetry when the GPU is up again.
    """
    started_at = require_instant(started_at, field="started_at")
    incident = Incident(
        **_scope_fields(scope),
        title=title,
        cause=cause,
        started_at=started_at,
        notes_for_owners=notes_for_owners,
        internal_notes=internal_notes,
        opened_by=by,
        telemetry_event_id=telemetry_event_id,
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
    incident = lock_one(Incident.objects.filter(pk=incident.pk))
    if incident.ended_at is not None:
        raise ValidationError(
            {"ended_at": f"Incident {incident} already ended at {iso_z(incident.ended_at)}."}
        )
    if ended_at <= incident.started_at:
        raise ValidationError(
            {
                "ended_at": f"Incident {incident} started at {iso_z(incident.started_at)}; "
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


def incident_draft_blocked(*, gpu: Gpu, at: datetime) -> bool:
    """Whether an event on ``gpu`` at ``at`` is already in hand, so it opens no draft.

    It is when the GPU has an incident (on the GPU itself) that had not ended by ``at``, or a
    draft that had not ended by then: an open one until it recovered, a dismissed one until it
    recovered or was dismissed. So a second XID while a draft is open, a replayed event, and an
    event older than what the operator already handled open nothing; a confirmed draft is
    represented by its incident.
    """
    incident = Incident.objects.filter(gpu=gpu).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=at)
    )
    draft = IncidentDraft.objects.filter(gpu=gpu).filter(
        Q(status=IncidentDraft.Status.OPEN, recovered_at__isnull=True)
        | Q(status=IncidentDraft.Status.OPEN, recovered_at__gt=at)
        | Q(status=IncidentDraft.Status.DISMISSED, recovered_at__gt=at)
        | Q(status=IncidentDraft.Status.DISMISSED, recovered_at__isnull=True, decided_at__gt=at)
    )
    return incident.exists() or draft.exists()


@transaction.atomic
def incident_draft_open(
    *, gpu: Gpu, telemetry_event_id: int, title: str, occurred_at: datetime
) -> IncidentDraft | None:
    """Opens a draft incident on ``gpu`` from a telemetry event, unless that event or the
    trouble it reports is already in hand (``incident_draft_blocked``); returns None then.

    Dated at the event's second (its fraction dropped: incidents are exact to the second).
    Nothing outside the console sees a draft: no webhook, no owner notice, no billing.
    """
    if occurred_at.tzinfo is None:
        raise ValidationError({"occurred_at": "Give an aware (UTC) instant."})
    started_at = occurred_at.astimezone(UTC).replace(microsecond=0)
    # The GPU row serialises drafts of one GPU: two passes cannot both see "nothing open".
    lock(Gpu.objects.filter(pk=gpu.pk))
    if IncidentDraft.objects.filter(telemetry_event_id=telemetry_event_id).exists():
        return None
    if Incident.objects.filter(telemetry_event_id=telemetry_event_id).exists():
        return None
    if incident_draft_blocked(gpu=gpu, at=started_at):
        return None
    draft = IncidentDraft(
        gpu=gpu,
        telemetry_event_id=telemetry_event_id,
        title=title[:200],
        cause=IncidentCause.HARDWARE,
        started_at=started_at,
    )
    draft.full_clean()
    draft.save()
    audit_log(
        actor=None,
        events=[AuditEvent.of(draft, action="incident_draft.open", after=snapshot(draft))],
    )
    return draft


def _draft_locked(draft: IncidentDraft) -> IncidentDraft:
    draft = lock_one(IncidentDraft.objects.select_related("gpu").filter(pk=draft.pk))
    if draft.status != IncidentDraft.Status.OPEN:
        raise ValidationError(
            {"__all__": f"{draft} was already {draft.get_status_display().lower()}."}
        )
    return draft


@transaction.atomic
def incident_draft_confirm(
    *,
    draft: IncidentDraft,
    cause: str,
    by: User | None,
    title: str = "",
    notes_for_owners: str = "",
) -> Incident:
    """The operator confirms a draft with its cause: the incident is opened on the GPU from
    the event's instant (and, if the telemetry already saw the GPU up again, resolved then).
    Only from here on does it count in availability, hosting-fee waivers and owners' views."""
    draft = _draft_locked(draft)
    if cause not in IncidentCause.values:
        raise ValidationError({"cause": f"{cause!r} is not an incident cause."})
    incident = incident_open(
        scope=draft.gpu,
        title=title.strip() or draft.title,
        cause=cause,
        started_at=draft.started_at,
        notes_for_owners=notes_for_owners,
        by=by,
        telemetry_event_id=draft.telemetry_event_id,
    )
    if draft.recovered_at is not None:
        incident = incident_close(incident=incident, ended_at=draft.recovered_at, by=by)
    before = {"status": draft.status, "cause": draft.cause}
    draft.status = IncidentDraft.Status.CONFIRMED
    draft.cause = cause
    draft.incident = incident
    draft.decided_by = by
    draft.decided_at = timezone.now()
    draft.save(update_fields=["status", "cause", "incident", "decided_by", "decided_at"])
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                draft,
                action="incident_draft.confirm",
                before=before,
                after={"status": draft.status, "cause": cause, "incident_id": incident.pk},
            )
        ],
    )
    return incident


@transaction.atomic
def incident_draft_dismiss(*, draft: IncidentDraft, reason: str, by: User | None) -> IncidentDraft:
    """The operator says a draft is no incident (a false alarm, already covered elsewhere)."""
    reason = require_reason(reason)
    draft = _draft_locked(draft)
    draft.status = IncidentDraft.Status.DISMISSED
    draft.decided_by = by
    draft.decided_at = timezone.now()
    draft.save(update_fields=["status", "decided_by", "decided_at"])
    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent.of(
                draft,
                action="incident_draft.dismiss",
                before={"status": IncidentDraft.Status.OPEN},
                after={"status": draft.status},
            )
        ],
    )
    return draft


@transaction.atomic
def incident_draft_recover(*, draft: IncidentDraft, at: datetime) -> IncidentDraft:
    """Records that the telemetry shows the draft's GPU up again from ``at``; the draft stays
    for the operator to confirm (the incident is then opened already resolved) or dismiss."""
    at = require_instant(at, field="at")
    draft = lock_one(IncidentDraft.objects.filter(pk=draft.pk))
    if draft.recovered_at is not None:
        return draft
    if at <= draft.started_at:
        raise ValidationError({"at": f"{draft} started at {iso_z(draft.started_at)}."})
    draft.recovered_at = at
    draft.save(update_fields=["recovered_at"])
    audit_log(
        actor=None,
        events=[
            AuditEvent.of(
                draft,
                action="incident_draft.recover",
                before={"recovered_at": None},
                after={"recovered_at": at},
            )
        ],
    )
    return draft


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

"""Notifications: what each user wants, finding what to tell them, and telling it by email and
in the portal.

The scan never walks every GPU or incident. It reads two append-only tables forward from a
cursor (their primary keys): the audit trail for incidents opened and closed and maintenance
scheduled, and the telemetry's state transitions for GPUs going down or silent. A GPU that
went down or silent is put on a watch list that holds only GPUs down *now*; each tick looks
at that list alone. The cursor re-reads a small overlap behind itself, because ids are taken
before commit and a slow transaction can commit an id below one already read; a notice is
unique on (user, kind, key), so reading twice never tells twice.

A notice is rendered when created and sent by a task that claims it with compare-and-set; a
worker that dies after sending and before marking may send it again after the claim expires
(at least once, as everything in Steward). Everything told is also written, in the same
transaction, as a ``PortalNotice`` for the portal's list, whatever the user's email choices
(they choose emails; the GPU-down threshold applies to both).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max, Q
from django.template.loader import render_to_string
from django.urls import reverse

from accounts.models import AuditEntry, Membership, User
from billing.models import Statement
from billing.reports.report import period_name
from billing.selectors.facts import gpu_facts
from fleet.models import Gpu, Incident, LifecycleState, MaintenanceWindow, Ownership
from portal import conf
from portal.access import members_concerned
from portal.mail import mail_send
from portal.models import (
    GPU_DOWN_MINUTES_MAX,
    Notice,
    NoticeKind,
    NotificationPreference,
    OutageWatch,
    PortalNotice,
    ScanCursor,
)
from telemetry.models import GpuState, GpuStateTransition

CURSOR_OVERLAP = 1_000  # ids re-read behind the cursor (see the module's docstring)
CURSOR_CHUNK = 50_000  # ids read per tick at most
CLAIM_TIMEOUT = timedelta(minutes=10)
AUDIT_ACTIONS = ("incident.open", "incident.close", "maintenance.schedule")
# Statements are read forward by publishing time; an approval that committed late carries a
# time a little behind the cursor, so each tick re-reads this much (notices are unique).
STATEMENT_OVERLAP = timedelta(minutes=10)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ---- preferences ----------------------------------------------------------------------------


def preferences_for(*, user: User) -> NotificationPreference:
    """The user's choices; the defaults (unsaved) when they never chose."""
    found = NotificationPreference.objects.filter(user=user).first()
    return found or NotificationPreference(user=user)


def preferences_save(
    *,
    user: User,
    statement_published: bool,
    gpu_down: bool,
    gpu_down_after_minutes: int,
    incidents: bool,
    maintenance: bool,
    now: datetime,
) -> NotificationPreference:
    preference = preferences_for(user=user)
    preference.statement_published = statement_published
    preference.gpu_down = gpu_down
    preference.gpu_down_after_minutes = gpu_down_after_minutes
    preference.incidents = incidents
    preference.maintenance = maintenance
    preference.updated_at = now
    preference.full_clean()
    preference.save()
    return preference


def _preferences(user_ids: Iterable[Any]) -> dict[Any, NotificationPreference]:
    ids = set(user_ids)
    found = {p.user_id: p for p in NotificationPreference.objects.filter(user_id__in=ids)}
    return {pk: found.get(pk) or NotificationPreference(user_id=pk) for pk in ids}


# ---- scanning -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanResult:
    candidates: int  # emails due this tick, including ones that already existed
    watched: int
    shown: int = 0  # portal notices due this tick, including ones that already existed


@dataclass(frozen=True)
class Told:
    """One thing to tell one user about one of their owner accounts: an email when they want
    one (``email``), and a notice in the portal in any case."""

    user_id: Any
    owner_id: Any
    kind: str
    key: str
    subject: str
    body: str
    path: str  # the portal page it is about
    email: bool
    now: datetime
    not_before: datetime

    def email_notice(self) -> Notice:
        return Notice(
            user_id=self.user_id,
            kind=self.kind,
            key=self.key,
            subject=self.subject,
            body=self.body,
            created_at=self.now,
            not_before=self.not_before,
        )

    def portal_notice(self) -> PortalNotice:
        return PortalNotice(
            user_id=self.user_id,
            owner_id=self.owner_id,
            kind=self.kind,
            key=self.key,
            title=self.subject,
            link=self.path,
            created_at=self.now,
            shown_from=self.not_before,
        )


def _one_account_each(pairs: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """(user, owner) pairs reduced to one owner account per user (the first by id), sorted:
    a notice is unique per user and thing, however many of their accounts it concerns."""
    chosen: dict[Any, Any] = {}
    for user_id, owner_id in sorted(pairs, key=lambda p: (str(p[0]), str(p[1]))):
        chosen.setdefault(user_id, owner_id)
    return sorted(chosen.items(), key=lambda p: str(p[0]))


def _advance(name: str, top: int | None) -> tuple[int, int] | None:
    """Locks the cursor (another scan holding it: None) and returns the id range to read.

    A new cursor starts at the table's current end: history before the feature existed is
    not announced.
    """
    cursor = ScanCursor.objects.select_for_update(skip_locked=True).filter(name=name).first()
    if cursor is None:
        _, made = ScanCursor.objects.get_or_create(
            name=name, defaults={"position": top or 0, "floor": top or 0}
        )
        if made:
            return None
        cursor = ScanCursor.objects.select_for_update(skip_locked=True).filter(name=name).first()
        if cursor is None:
            return None
    low = max(cursor.floor, cursor.position - CURSOR_OVERLAP)
    high = min(top or 0, cursor.position + CURSOR_CHUNK)
    if high > cursor.position:
        ScanCursor.objects.filter(name=name).update(position=high)
    return low, max(high, cursor.position)


@transaction.atomic
def notifications_scan(*, now: datetime) -> ScanResult:
    """Creates the emails and portal notices due at ``now`` (each once, however often it
    runs), both in this one transaction."""
    told: list[Told] = []
    told += _scan_audit(now=now)
    told += _scan_outages(now=now)
    told += _scan_statements(now=now)
    emails = [t.email_notice() for t in told if t.email]
    Notice.objects.bulk_create(emails, ignore_conflicts=True)
    PortalNotice.objects.bulk_create([t.portal_notice() for t in told], ignore_conflicts=True)
    return ScanResult(candidates=len(emails), watched=OutageWatch.objects.count(), shown=len(told))


def _scan_audit(*, now: datetime) -> list[Told]:
    top = AuditEntry.objects.aggregate(top=Max("id"))["top"]
    span = _advance("audit", top)
    if span is None:
        return []
    low, high = span
    entries = list(
        AuditEntry.objects.filter(id__gt=low, id__lte=high, action__in=AUDIT_ACTIONS)
        .order_by("id")
        .values_list("action", "object_id")
    )
    incident_ids = {int(oid) for action, oid in entries if action.startswith("incident.")}
    window_ids = {int(oid) for action, oid in entries if action.startswith("maintenance.")}
    incidents = Incident.objects.in_bulk(incident_ids)
    windows = MaintenanceWindow.objects.in_bulk(window_ids)
    out: list[Told] = []
    for action, object_id in entries:
        if action == "incident.open" and int(object_id) in incidents:
            out += _about_incident(incidents[int(object_id)], NoticeKind.INCIDENT_OPENED, now)
        elif action == "incident.close" and int(object_id) in incidents:
            incident = incidents[int(object_id)]
            if incident.ended_at is not None:
                out += _about_incident(incident, NoticeKind.INCIDENT_RESOLVED, now)
        elif action == "maintenance.schedule" and int(object_id) in windows:
            window = windows[int(object_id)]
            if window.cancelled_at is None:
                out += _about_maintenance(window, now)
    return out


def _about_incident(incident: Incident, kind: NoticeKind, now: datetime) -> list[Told]:
    members = _one_account_each(members_concerned(scoped=incident))
    preferences = _preferences(user_id for user_id, _ in members)
    opened = kind == NoticeKind.INCIDENT_OPENED
    subject = f"Incident {'opened' if opened else 'resolved'}: {incident.title}"
    body = render_to_string(
        "portal/email/incident.txt",
        {"incident": incident, "opened": opened, "link": _link("portal:incident", incident.pk)},
    )
    return [
        Told(
            user_id=user_id,
            owner_id=owner_id,
            kind=kind,
            key=f"incident:{incident.pk}",
            subject=subject,
            body=body,
            path=reverse("portal:incident", args=[incident.pk]),
            email=preferences[user_id].incidents,
            now=now,
            not_before=now,
        )
        for user_id, owner_id in members
    ]


def _about_maintenance(window: MaintenanceWindow, now: datetime) -> list[Told]:
    members = _one_account_each(members_concerned(scoped=window))
    preferences = _preferences(user_id for user_id, _ in members)
    body = render_to_string(
        "portal/email/maintenance.txt",
        {"window": window, "link": _link("portal:maintenance-window", window.pk)},
    )
    return [
        Told(
            user_id=user_id,
            owner_id=owner_id,
            kind=NoticeKind.MAINTENANCE_ANNOUNCED,
            key=f"maintenance:{window.pk}",
            subject=f"Maintenance announced: {window.title}",
            body=body,
            path=reverse("portal:maintenance-window", args=[window.pk]),
            email=preferences[user_id].maintenance,
            now=now,
            not_before=max(now, window.announced_at),
        )
        for user_id, owner_id in members
    ]


def _scan_outages(*, now: datetime) -> list[Told]:
    top = GpuStateTransition.objects.aggregate(top=Max("id"))["top"]
    span = _advance("transitions", top)
    if span is not None:
        low, high = span
        fresh = GpuStateTransition.objects.filter(
            id__gt=low, id__lte=high, state__in=[GpuState.DOWN, GpuState.NO_DATA]
        ).values_list("id", "gpu_id", "state", "at")
        OutageWatch.objects.bulk_create(
            [
                OutageWatch(transition_id=tid, gpu_id=gpu_id, state=state, since=at)
                for tid, gpu_id, state, at in fresh
                if at > now - timedelta(minutes=GPU_DOWN_MINUTES_MAX)
            ],
            ignore_conflicts=True,
        )
    watches = list(OutageWatch.objects.order_by("since"))
    if not watches:
        return []
    gpu_ids = {w.gpu_id for w in watches}
    latest = dict(
        GpuStateTransition.objects.filter(gpu_id__in=gpu_ids)
        .order_by("gpu_id", "-at")
        .distinct("gpu_id")
        .values_list("gpu_id", "id")
    )
    over = [
        w.pk
        for w in watches
        if latest.get(w.gpu_id) != w.transition_id
        or w.since <= now - timedelta(minutes=GPU_DOWN_MINUTES_MAX)
    ]
    current = [w for w in watches if w.pk not in set(over)]
    OutageWatch.objects.filter(pk__in=over).delete()
    return _about_outages(current, now=now)


def _about_outages(watches: list[OutageWatch], *, now: datetime) -> list[Told]:
    if not watches:
        return []
    gpus = Gpu.objects.in_bulk([w.gpu_id for w in watches])
    in_service = [g for g in gpus.values() if g.lifecycle_state == LifecycleState.IN_SERVICE]
    holders: dict[Any, set[Any]] = defaultdict(set)  # gpu → owner ids holding it now
    for gpu_id, owner_id in (
        Ownership.objects.filter(gpu_id__in=[g.pk for g in in_service], valid_from__lte=now)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now))
        .values_list("gpu_id", "owner_id")
    ):
        holders[gpu_id].add(owner_id)
    members: dict[Any, set[Any]] = defaultdict(set)  # owner → active user ids
    for owner_id, user_id in Membership.objects.filter(
        owner_id__in={o for owners in holders.values() for o in owners}, user__is_active=True
    ).values_list("owner_id", "user_id"):
        members[owner_id].add(user_id)
    preferences = _preferences(u for users in members.values() for u in users)
    out: list[Told] = []
    for watch in watches:
        gpu = gpus.get(watch.gpu_id)
        if gpu is None or watch.gpu_id not in holders or _in_maintenance(gpu, now):
            continue
        minutes = (now - watch.since).total_seconds() / 60
        concerned = _one_account_each((u, o) for o in holders[watch.gpu_id] for u in members[o])
        down = watch.state == GpuState.DOWN
        for user_id, owner_id in concerned:
            pref = preferences[user_id]
            if minutes < pref.gpu_down_after_minutes:
                continue
            context = {
                "gpu": gpu,
                "down": down,
                "since": watch.since,
                "minutes": pref.gpu_down_after_minutes,
                "link": _link("portal:gpu", gpu.pk),
            }
            out.append(
                Told(
                    user_id=user_id,
                    owner_id=owner_id,
                    kind=NoticeKind.GPU_DOWN if down else NoticeKind.GPU_SILENT,
                    key=f"gpu:{gpu.pk}:{watch.since.isoformat()}",
                    subject=f"GPU {gpu.serial} {'down' if down else 'silent'} since "
                    f"{watch.since:%Y-%m-%d %H:%M} UTC",
                    body=render_to_string("portal/email/gpu_down.txt", context),
                    path=reverse("portal:gpu", args=[gpu.pk]),
                    email=pref.gpu_down,
                    now=now,
                    not_before=now,
                )
            )
    return out


def _micros(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


def _scan_statements(*, now: datetime) -> list[Told]:
    """Statements published since the last tick, by ``published_at`` (a cursor in µs)."""
    top = Statement.objects.filter(status=Statement.Status.PUBLISHED).aggregate(
        top=Max("published_at")
    )["top"]
    top_us = _micros(top) if top is not None else 0
    cursor = (
        ScanCursor.objects.select_for_update(skip_locked=True).filter(name="statements").first()
    )
    if cursor is None:
        # A new cursor starts at the end: statements published before are not announced.
        ScanCursor.objects.get_or_create(
            name="statements", defaults={"position": top_us, "floor": top_us}
        )
        return []
    low = max(cursor.floor, cursor.position - STATEMENT_OVERLAP // timedelta(microseconds=1))
    if top_us > cursor.position:
        ScanCursor.objects.filter(name="statements").update(position=top_us)
    published = list(
        Statement.objects.filter(
            status=Statement.Status.PUBLISHED,
            published_at__gt=EPOCH + timedelta(microseconds=low),
        )
        .select_related("period", "owner")
        .order_by("published_at", "pk")
    )
    return _about_statements(published, now=now)


def _about_statements(statements: list[Statement], *, now: datetime) -> list[Told]:
    if not statements:
        return []
    members: dict[Any, set[Any]] = defaultdict(set)
    for owner_id, user_id in Membership.objects.filter(
        owner_id__in={s.owner_id for s in statements}, user__is_active=True
    ).values_list("owner_id", "user_id"):
        members[owner_id].add(user_id)
    preferences = _preferences(u for users in members.values() for u in users)
    out: list[Told] = []
    for statement in statements:
        period = period_name(statement.period.start, statement.period.end)
        body = render_to_string(
            "portal/email/statement_published.txt",
            {
                "statement": statement,
                "period": period,
                "link": _link("portal:statement", statement.pk),
            },
        )
        for user_id in sorted(members[statement.owner_id], key=str):
            out.append(
                Told(
                    user_id=user_id,
                    owner_id=statement.owner_id,
                    kind=NoticeKind.STATEMENT_PUBLISHED,
                    key=f"statement:{statement.pk}",
                    subject=f"Statement published: {period}, {statement.currency}",
                    body=body,
                    path=reverse("portal:statement", args=[statement.pk]),
                    email=preferences[user_id].statement_published,
                    now=now,
                    not_before=now,
                )
            )
    return out


def _in_maintenance(gpu: Gpu, now: datetime) -> bool:
    """Planned maintenance covers the GPU now: being down is expected, not news."""
    (facts,) = gpu_facts(gpu_ids=[gpu.pk], start=now - timedelta(seconds=1), end=now)
    return bool(facts.maintenance)


def _link(name: str, pk: Any) -> str:
    return f"{conf.base_url()}{reverse(name, args=[pk])}"


# ---- sending --------------------------------------------------------------------------------


def notices_send(*, now: datetime, limit: int | None = None) -> int:
    """Sends due notices, each claimed first so two workers never send the same one."""
    limit = limit or conf.notices_per_task()
    due = list(
        Notice.objects.filter(sent_at__isnull=True, not_before__lte=now)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - CLAIM_TIMEOUT))
        .order_by("not_before", "pk")
        .values_list("pk", "claimed_at")[:limit]
    )
    sent = 0
    for pk, claimed_at in due:
        if not Notice.objects.filter(pk=pk, claimed_at=claimed_at, sent_at__isnull=True).update(
            claimed_at=now
        ):
            continue  # another worker took it
        notice = Notice.objects.select_related("user").get(pk=pk)
        mail_send(to=notice.user.email, subject=notice.subject, body=notice.body)
        Notice.objects.filter(pk=pk).update(sent_at=now)
        sent += 1
    return sent


# Deleted in passes of this many rows, each its own short transaction.
_PRUNE_BATCH = 5000


def portal_notices_prune(*, now: datetime) -> int:
    """Deletes the portal's notices first shown more than ``notice_retention_days`` before
    ``now``, read or not; returns how many. The email ``Notice`` rows stay: they are what
    keeps a scan from telling the same thing twice."""
    cutoff = now - timedelta(days=conf.notice_retention_days())
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(
                PortalNotice.objects.filter(shown_from__lt=cutoff)
                .order_by("pk")
                .values_list("pk", flat=True)[:_PRUNE_BATCH]
            )
            PortalNotice.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
        if len(ids) < _PRUNE_BATCH:
            return deleted

"""What the portal itself records: logged-in sessions, notification choices, notices sent by
email and notices shown in the portal."""

from __future__ import annotations

from typing import ClassVar

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Owner, User

# A GPU down or silent for longer than this has been notified to everyone who wanted it.
GPU_DOWN_MINUTES_MIN = 5
GPU_DOWN_MINUTES_MAX = 7 * 24 * 60
GPU_DOWN_MINUTES_DEFAULT = 30


class UserSession(models.Model):
    """One login: which session it opened, from where, with what browser, and when.

    Written by ``portal.services.sessions.session_record`` from the login view (no signals);
    revoking deletes the Django session and this row together.
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="portal_sessions")
    session_key = models.CharField(max_length=40, unique=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["-created_at"]
        indexes: ClassVar = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.user_id} from {self.ip or '?'} at {self.created_at:%Y-%m-%d %H:%M}"


class NotificationPreference(models.Model):
    """Which emails one user wants; a user without a row gets the defaults below."""

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, primary_key=True, related_name="notification_preference"
    )
    statement_published = models.BooleanField(default=True)
    gpu_down = models.BooleanField("GPU down or silent", default=True)
    gpu_down_after_minutes = models.PositiveIntegerField(
        default=GPU_DOWN_MINUTES_DEFAULT,
        validators=[
            MinValueValidator(GPU_DOWN_MINUTES_MIN),
            MaxValueValidator(GPU_DOWN_MINUTES_MAX),
        ],
        help_text="Notify when a GPU has been down or silent for longer than this.",
    )
    incidents = models.BooleanField("incident opened or resolved", default=True)
    maintenance = models.BooleanField("maintenance announced", default=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(gpu_down_after_minutes__gte=GPU_DOWN_MINUTES_MIN)
                & Q(gpu_down_after_minutes__lte=GPU_DOWN_MINUTES_MAX),
                name="portal_pref_gpu_down_minutes_range",
            ),
        ]

    def __str__(self) -> str:
        return f"notification preferences of {self.user_id}"


class NoticeKind(models.TextChoices):
    GPU_DOWN = "gpu_down", "GPU down"
    GPU_SILENT = "gpu_silent", "GPU silent"
    INCIDENT_OPENED = "incident_opened", "Incident opened"
    INCIDENT_RESOLVED = "incident_resolved", "Incident resolved"
    MAINTENANCE_ANNOUNCED = "maintenance_announced", "Maintenance announced"
    STATEMENT_PUBLISHED = "statement_published", "Statement published"


class Notice(models.Model):
    """One email to one user about one thing; unique on (user, kind, key), so it exists once.

    Rendered when created; sent by a task that claims it with compare-and-set, not before
    ``not_before`` (a maintenance window announced for later).
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="portal_notices")
    kind = models.CharField(max_length=24, choices=NoticeKind.choices)
    key = models.CharField(max_length=100, help_text="What it is about, e.g. incident:42.")
    subject = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    not_before = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["user", "kind", "key"], name="portal_notice_once"),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["not_before"], name="portal_notice_unsent", condition=Q(sent_at=None)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} to {self.user_id}"


class PortalNotice(models.Model):
    """One notice in one user's list in the portal, about one thing of one owner account.

    Written by the notification scan in the same transaction as the email ``Notice`` (the
    same events, unique on the same (user, kind, key)), but whatever the user's email
    choices: the settings choose emails, the list shows everything. The portal lists it only
    while the user is still a member of ``owner`` and from ``shown_from`` on (maintenance: its
    announcement).
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="portal_inbox")
    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=24, choices=NoticeKind.choices)
    key = models.CharField(max_length=100, help_text="What it is about, e.g. incident:42.")
    title = models.CharField(max_length=200)
    link = models.CharField(max_length=200, help_text="The portal page it is about (a path).")
    created_at = models.DateTimeField(default=timezone.now)
    shown_from = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-shown_from", "-pk"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "kind", "key"], name="portal_portalnotice_once"
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["user", "-shown_from"], name="portal_inbox_by_user"),
            models.Index(fields=["user"], name="portal_inbox_unread", condition=Q(read_at=None)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} for {self.user_id}"


class ScanCursor(models.Model):
    """How far a notification scan has read an append-only table (by primary key)."""

    name = models.CharField(max_length=40, primary_key=True)
    position = models.BigIntegerField(default=0)
    floor = models.BigIntegerField(
        default=0, help_text="Where the cursor started: the overlap never reads below it."
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"


class OutageWatch(models.Model):
    """A GPU whose telemetry went down or silent, watched until it recovers or every
    threshold has passed; keeps the GPU-down scan to the GPUs that are down now."""

    transition_id = models.BigIntegerField(unique=True)
    gpu_id = models.UUIDField()
    state = models.CharField(max_length=8)
    since = models.DateTimeField()

    class Meta:
        ordering: ClassVar = ["since"]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.state} since {self.since:%Y-%m-%d %H:%M}"

"""Partner webhooks: endpoints, the event outbox, deliveries and their attempts.

Events are written by the service that makes the change, in its transaction (``webhooks.outbox``),
so an event exists exactly when its change committed. A dispatch pass turns each event into one
delivery per subscribed endpoint; a delivery is attempted until its endpoint answers 2xx, for
at most ``WEBHOOK_RETRY_WINDOW_S``. Every attempt leaves a row.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from accounts.models import ApiScope, Partner, User


class EventType(models.TextChoices):
    STATEMENT_PUBLISHED = "statement.published", "A statement was published"
    INCIDENT_OPENED = "incident.opened", "An incident was opened"
    INCIDENT_RESOLVED = "incident.resolved", "An incident was resolved"
    GPU_STATE_CHANGED = "gpu.state_changed", "A GPU's telemetry state changed"
    OWNERSHIP_CHANGED = "ownership.changed", "A GPU's ownership changed"


def scope_for(event_type: str) -> str:
    """The read scope a partner's grant needs for an owner to receive this event about it."""
    if event_type == EventType.STATEMENT_PUBLISHED:
        return ApiScope.STATEMENTS_READ
    return ApiScope.FLEET_READ


class WebhookEndpoint(models.Model):
    """A partner's URL that receives the chosen event types, signed with its secret.

    The secret is never stored: it is derived from ``STEWARD_WEBHOOK_KEY_SECRET``, the
    endpoint's id and ``secret_generation`` (``webhooks.signing``). Rotating bumps the
    generation; the previous one keeps signing until ``previous_secret_valid_until``.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    partner = models.ForeignKey(Partner, on_delete=models.PROTECT, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    event_types = ArrayField(models.CharField(max_length=32))
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=200, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    secret_generation = models.PositiveIntegerField(default=1)
    previous_secret_valid_until = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["created_at"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=models.Q(event_types__contained_by=list(EventType.values))
                & ~models.Q(event_types=[]),
                name="webhooks_endpoint_known_event_types",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url} ({self.partner_id})"


class WebhookEvent(models.Model):
    """One change partners may hear about: the outbox row, written with the change.

    ``owner_ids`` are the owner accounts it concerns; ``data`` is what any recipient may read,
    ``owner_data`` what only a partner granted that owner may read (by owner id).
    ``dedupe_key`` makes emitting idempotent (a recomputed GPU state is not a new event).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.CharField(max_length=32, choices=EventType.choices)
    owner_ids = ArrayField(models.UUIDField())
    data = models.JSONField()
    owner_data = models.JSONField(default=dict)
    dedupe_key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["created_at"]
        indexes: ClassVar = [
            models.Index(
                fields=["created_at"],
                condition=models.Q(dispatched_at__isnull=True),
                name="webhooks_event_undispatched",
            ),
            models.Index(fields=["created_at"], name="webhooks_event_created"),
        ]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=models.Q(type__in=list(EventType.values)),
                name="webhooks_event_known_type",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"

    @property
    def message_id(self) -> str:
        """The Standard Webhooks ``webhook-id``: the same for every attempt and replay."""
        return f"msg_{self.id.hex}"


class WebhookDelivery(models.Model):
    """One event to one endpoint: attempted until 2xx, 410, or the retry window ends."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(WebhookEvent, on_delete=models.PROTECT, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    replay_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="replays"
    )
    replayed_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["event", "endpoint"],
                condition=models.Q(replay_of__isnull=True),
                name="webhooks_delivery_once_per_endpoint",
            ),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status__in=["pending", "sending"]),
                name="webhooks_delivery_due",
            ),
            models.Index(fields=["endpoint", "-created_at"], name="webhooks_delivery_endpoint"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.id} ({self.status})"


class WebhookAttempt(models.Model):
    """One HTTP request of a delivery, as it went: status, duration, what came back."""

    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering: ClassVar = ["delivery", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhooks_attempt_once"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"

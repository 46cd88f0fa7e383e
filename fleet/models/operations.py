"""Planned maintenance and unplanned incidents, each scoped to a site, cluster, node or GPU."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import User
from fleet.models.inventory import Cluster, Gpu, Node, Site

_ONE_SCOPE = (
    Q(site__isnull=False, cluster__isnull=True, node__isnull=True, gpu__isnull=True)
    | Q(site__isnull=True, cluster__isnull=False, node__isnull=True, gpu__isnull=True)
    | Q(site__isnull=True, cluster__isnull=True, node__isnull=False, gpu__isnull=True)
    | Q(site__isnull=True, cluster__isnull=True, node__isnull=True, gpu__isnull=False)
)


class Scoped(models.Model):
    """Exactly one of site, cluster, node or GPU says what is affected."""

    site = models.ForeignKey(
        Site, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, null=True, blank=True, related_name="+")

    class Meta:
        abstract = True

    @property
    def scope(self) -> Site | Cluster | Node | Gpu:
        for target in (self.site, self.cluster, self.node, self.gpu):
            if target is not None:
                return target
        raise ValueError("no scope set")


class MaintenanceWindow(Scoped):
    """Planned work, announced in advance; its seconds count as ``maintenance``."""

    title = models.CharField(max_length=200)
    description = models.TextField(blank=True, help_text="Shown to affected owners.")
    announced_at = models.DateTimeField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-starts_at"]
        constraints: ClassVar = [
            models.CheckConstraint(condition=_ONE_SCOPE, name="fleet_maintenance_one_scope"),
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("starts_at")), name="fleet_maintenance_positive_interval"
            ),
            models.CheckConstraint(
                condition=Q(announced_at__lte=F("starts_at")),
                name="fleet_maintenance_announced_before_start",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class IncidentCause(models.TextChoices):
    HARDWARE = "hardware", "Hardware"
    POWER = "power", "Power"
    COOLING = "cooling", "Cooling"
    NETWORK = "network", "Network"
    SOFTWARE = "software", "Software"
    OWNER_REQUESTED = "owner_requested", "Owner-requested"


class Incident(Scoped):
    """Unplanned trouble; its seconds count as ``down``. Open while ``ended_at`` is null."""

    title = models.CharField(max_length=200)
    cause = models.CharField(max_length=20, choices=IncidentCause.choices)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    notes_for_owners = models.TextField(blank=True, help_text="Visible to affected owners.")
    internal_notes = models.TextField(blank=True)
    opened_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # A plain id, not a foreign key: fleet does not depend on telemetry (the layers run
    # fleet <- telemetry), and events outlive nothing they would have to cascade to.
    telemetry_event_id = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The telemetry event (XID or lost GPU) this incident was opened from.",
    )

    class Meta:
        ordering: ClassVar = ["-started_at"]
        constraints: ClassVar = [
            models.CheckConstraint(condition=_ONE_SCOPE, name="fleet_incident_one_scope"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gt=F("started_at")),
                name="fleet_incident_positive_interval",
            ),
            models.UniqueConstraint(
                fields=["telemetry_event_id"],
                condition=Q(telemetry_event_id__isnull=False),
                name="fleet_incident_event_once",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def operator_caused(self) -> bool:
        return operator_caused(self.cause)


class IncidentDraft(models.Model):
    """An incident the telemetry suggests (a down-severity XID, a lost GPU), until an operator
    confirms it (an ``Incident`` is opened from it) or dismisses it.

    A separate table, not a status on ``Incident``: billing, the portal and the partner API
    read ``fleet_incident`` directly, so a draft there would waive hosting fees and count as
    down time before anyone had looked at it. Here it changes nothing until it is confirmed.
    """

    class Status(models.TextChoices):
        OPEN = "open", "Awaiting confirmation"
        CONFIRMED = "confirmed", "Confirmed"
        DISMISSED = "dismissed", "Dismissed"

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="+")
    # A plain id, as on Incident: the event lives in telemetry.
    telemetry_event_id = models.BigIntegerField(
        unique=True, help_text="The telemetry event that opened it."
    )
    title = models.CharField(max_length=200)
    cause = models.CharField(
        max_length=20,
        choices=IncidentCause.choices,
        default=IncidentCause.HARDWARE,
        help_text="The proposed cause; the operator confirms it or gives another.",
    )
    started_at = models.DateTimeField(help_text="When the event happened (UTC, whole second).")
    recovered_at = models.DateTimeField(
        null=True, blank=True, help_text="When the telemetry showed the GPU up again."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    incident = models.OneToOneField(
        Incident, on_delete=models.PROTECT, null=True, blank=True, related_name="draft"
    )
    decided_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-started_at"]
        verbose_name = "draft incident"
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(recovered_at__isnull=True) | Q(recovered_at__gt=F("started_at")),
                name="fleet_incidentdraft_positive_interval",
            ),
            models.CheckConstraint(
                condition=(Q(status="confirmed") & Q(incident__isnull=False))
                | (~Q(status="confirmed") & Q(incident__isnull=True)),
                name="fleet_incidentdraft_confirmed_has_incident",
            ),
            models.CheckConstraint(
                condition=Q(status="open", decided_at__isnull=True)
                | (~Q(status="open") & Q(decided_at__isnull=False)),
                name="fleet_incidentdraft_decided_when_closed",
            ),
        ]
        indexes: ClassVar = [models.Index(fields=["gpu", "started_at"])]

    def __str__(self) -> str:
        return f"{self.title} (draft, {self.get_status_display().lower()})"


def operator_caused(cause: str) -> bool:
    """Every cause but an owner's own request is the operator's responsibility."""
    return cause != IncidentCause.OWNER_REQUESTED

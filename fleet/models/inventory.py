"""Sites, clusters, nodes, GPU models and GPUs; dated lifecycle and placement.

A GPU keeps its identity (NVML UUID, serial) for life. Where it sits and what state it is in
are dated rows that are closed and opened, never overwritten, so any past instant can be
reconstructed.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import User


class Site(models.Model):
    """A data centre."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    code = models.SlugField(max_length=32, unique=True)
    name = models.CharField(max_length=200)
    country = models.CharField(max_length=2, help_text="ISO 3166-1 alpha-2")
    time_zone = models.CharField(max_length=64, default="UTC")

    class Meta:
        ordering: ClassVar = ["code"]

    def __str__(self) -> str:
        return self.name


class Cluster(models.Model):
    """A managed cluster at a site; revenue and rate cards are per cluster."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="clusters")
    code = models.SlugField(max_length=32)
    name = models.CharField(max_length=200)

    class Meta:
        ordering: ClassVar = ["site__code", "code"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["site", "code"], name="fleet_cluster_code_per_site"),
        ]

    def __str__(self) -> str:
        return f"{self.site.code}/{self.code}"


class Node(models.Model):
    """A server in a cluster that holds GPUs and runs one agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=253, unique=True)
    gpu_slots = models.PositiveSmallIntegerField(default=8)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    decommissioned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class GpuModel(models.Model):
    """A catalog entry: what kind of card a GPU is."""

    name = models.CharField(max_length=100, unique=True, help_text="As NVML reports it.")
    memory_mib = models.PositiveIntegerField()
    tdp_w = models.PositiveIntegerField("TDP (W)")

    class Meta:
        ordering: ClassVar = ["name"]

    def __str__(self) -> str:
        return self.name


class LifecycleState(models.TextChoices):
    RECEIVED = "received", "Received"
    BURN_IN = "burn_in", "Burn-in"
    IN_SERVICE = "in_service", "In service"
    MAINTENANCE = "maintenance", "Maintenance"
    RMA = "rma", "RMA"
    RETIRED = "retired", "Retired"


class Gpu(models.Model):
    """One physical card, identified for life by its NVML UUID and its serial."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    nvml_uuid = models.CharField("NVML UUID", max_length=64, unique=True)
    serial = models.CharField(max_length=64, unique=True)
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus")
    # The state of the newest lifecycle transition; kept in step by the lifecycle service.
    lifecycle_state = models.CharField(
        max_length=16, choices=LifecycleState.choices, default=LifecycleState.RECEIVED
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["serial"]
        indexes: ClassVar = [models.Index(fields=["lifecycle_state"])]
        permissions: ClassVar = [
            ("import_gpus", "Can import GPUs from CSV"),
            ("move_gpu", "Can move GPUs between nodes and change their lifecycle state"),
        ]

    def __str__(self) -> str:
        return f"{self.serial} ({self.model.name})" if "model" in self.__dict__ else self.serial


class LifecycleTransition(models.Model):
    """From ``at`` on, the GPU is in ``state``, until its next transition."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="lifecycle")
    state = models.CharField(max_length=16, choices=LifecycleState.choices)
    at = models.DateTimeField()
    reason = models.TextField(blank=True)
    recorded_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    recorded_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["gpu", "at"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["gpu", "at"], name="fleet_lifecycle_one_per_instant"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id} → {self.state} at {self.at:%Y-%m-%d %H:%M:%S}"


class Placement(models.Model):
    """The GPU sits in ``node`` (slot = NVML index) over ``[valid_from, valid_to)``.

    The database refuses overlaps (migration 0002): a GPU is in one place at a time, and a
    slot holds one GPU at a time.
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="placements")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="placements")
    slot = models.PositiveSmallIntegerField()
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["gpu", "valid_from"]
        indexes: ClassVar = [models.Index(fields=["node", "valid_from"])]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gt=F("valid_from")),
                name="fleet_placement_positive_interval",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id} in {self.node_id}[{self.slot}] from {self.valid_from:%Y-%m-%d}"

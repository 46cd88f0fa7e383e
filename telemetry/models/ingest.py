"""Raw batches as received (the outbox the workers drain), what they rejected, node health."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils import timezone

from fleet.models import Node


class BatchStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    CLAIMED = "claimed", "Claimed"
    PROCESSED = "processed", "Processed"
    FAILED = "failed", "Failed"


class IngestBatch(models.Model):
    """One agent batch, stored raw (gzipped, as signed) before the agent gets its answer."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    batch_id = models.UUIDField(help_text="The agent's Idempotency-Key.")
    body_sha256 = models.CharField(max_length=64)
    body = models.BinaryField(help_text="gzip(JSON) exactly as received; emptied by retention.")
    schema = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(
        max_length=10, choices=BatchStatus.choices, default=BatchStatus.PENDING
    )
    received_at = models.DateTimeField(default=timezone.now)
    signed_at = models.DateTimeField(help_text="X-Steward-Timestamp: the node's clock.")
    window_count = models.PositiveIntegerField(default=0)
    event_count = models.PositiveIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    processed_at = models.DateTimeField(null=True, blank=True)
    answer = models.JSONField(help_text="The body of the first answer, replayed on retries.")
    accepted_windows = models.PositiveIntegerField(default=0)
    accepted_events = models.PositiveIntegerField(default=0)
    rejected_count = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["-received_at"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["node", "batch_id"], name="telemetry_batch_key_per_node"
            ),
        ]
        indexes: ClassVar = [
            # The workers' queue: only unfinished batches are indexed, oldest first.
            models.Index(
                fields=["received_at"],
                name="telemetry_batch_unfinished",
                condition=models.Q(status__in=["pending", "claimed"]),
            ),
            models.Index(fields=["node", "received_at"], name="telemetry_batch_node_recv"),
        ]

    def __str__(self) -> str:
        return f"batch {self.batch_id} from {self.node_id} ({self.status})"

    @property
    def clock_skew_s(self) -> float:
        """Node clock minus server clock at receipt; positive means the node runs ahead."""
        return (self.signed_at - self.received_at).total_seconds()


class RejectedRecord(models.Model):
    """A window or event the worker refused, with why; the rest of its batch was accepted."""

    class Kind(models.TextChoices):
        WINDOW = "window", "Window"
        EVENT = "event", "Event"

    batch = models.ForeignKey(IngestBatch, on_delete=models.CASCADE, related_name="rejections")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=6, choices=Kind.choices)
    index = models.PositiveIntegerField(help_text="Position in the batch's windows or events.")
    gpu_uuid = models.CharField(max_length=64, blank=True)
    at = models.DateTimeField(null=True, blank=True, help_text="window_start or occurred_at")
    reason = models.CharField(max_length=40)
    detail = models.TextField()
    payload = models.JSONField()
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["-recorded_at"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["batch", "kind", "index"], name="telemetry_rejection_once"
            ),
        ]
        indexes: ClassVar = [models.Index(fields=["-recorded_at"], name="telemetry_rej_recent")]

    def __str__(self) -> str:
        return f"{self.kind} {self.index} of {self.batch_id}: {self.reason}"


class NodeStatus(models.Model):
    """What the ingest pipeline last heard from a node: when, its clock skew, and staleness."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, related_name="telemetry_status"
    )
    last_seen_at = models.DateTimeField(null=True, blank=True, help_text="Last batch received.")
    last_window_end = models.DateTimeField(null=True, blank=True)
    clock_skew_s = models.FloatField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    stale = models.BooleanField(default=False)
    stale_since = models.DateTimeField(null=True, blank=True)
    reported_gpus = models.JSONField(default=list, blank=True, help_text="At enrolment.")
    enrolled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["node"]
        verbose_name_plural = "node statuses"
        indexes: ClassVar = [
            models.Index(
                fields=["last_seen_at"],
                name="telemetry_node_fresh",
                condition=models.Q(stale=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} ({'stale' if self.stale else 'fresh'})"

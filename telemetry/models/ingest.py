"""Raw batches as received (the outbox the workers drain), what they rejected, node health."""

from __future__ import annotations

from typing import ClassVar

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from fleet.models import Node


class BatchStatus(models.TextChoices):
    # A batch being processed stays pending: its worker holds it by a row lock inside the
    # transaction that writes its windows (see IngestClaim), not by a committed state.
    PENDING = "pending", "Pending"
    PROCESSED = "processed", "Processed"
    FAILED = "failed", "Failed"


class IngestBatch(models.Model):
    """One agent batch, stored before the agent gets its answer; its body as received is a
    ``BatchBody`` beside it."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    batch_id = models.UUIDField(help_text="The agent's Idempotency-Key.")
    body_sha256 = models.CharField(max_length=64)
    schema = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(
        max_length=10, choices=BatchStatus.choices, default=BatchStatus.PENDING
    )
    received_at = models.DateTimeField(default=timezone.now)
    signed_at = models.DateTimeField(help_text="X-Steward-Timestamp: the node's clock.")
    window_count = models.PositiveIntegerField(default=0)
    event_count = models.PositiveIntegerField(default=0)
    claimed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the worker that processed it took it."
    )
    claimed_by = models.CharField(
        max_length=200, blank=True, help_text="The worker that processed (or failed) it."
    )
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Workers lost (killed, hung) while processing it."
    )
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
        # No index names a column the worker writes (status, counts, who, when), and the
        # table keeps half of each page free (fillfactor 50, migration 0006): marking a batch
        # processed is then a HOT update, with no index entry written. The queue of pending
        # batches is QueuedBatch; the bodies are BatchBody, so the rows kept twice (old and
        # new version on one page) are a few hundred bytes, not the whole batch.
        indexes: ClassVar = [
            models.Index(fields=["node", "received_at"], name="telemetry_batch_node_recv"),
            # The console's newest-first list and retention's cut-off, without a sort of the
            # table. received_at never changes, so the worker's update stays HOT.
            models.Index(fields=["received_at", "id"], name="telemetry_batch_received"),
        ]

    def __str__(self) -> str:
        return f"batch {self.batch_id} from {self.node_id} ({self.status})"

    @property
    def clock_skew_s(self) -> float:
        """Node clock minus server clock at receipt; positive means the node runs ahead."""
        return (self.signed_at - self.received_at).total_seconds()


class BatchBody(models.Model):
    """A batch's body exactly as received (gzip(JSON), as signed), written with the batch in
    the same statement and deleted with it by retention. Apart from the batch's row, which
    the worker rewrites once, so that rewrite does not copy the body."""

    batch = models.OneToOneField(
        IngestBatch, on_delete=models.CASCADE, primary_key=True, related_name="raw"
    )
    body = models.BinaryField()
    # The windows as the worker's COPY sends them, made by the endpoint from the body it
    # decoded (``telemetry.services.processing.prepared``); null for batches stored before.
    rows = models.BinaryField(null=True, blank=True)

    def __str__(self) -> str:
        return f"body of batch {self.batch_id}"


class QueuedBatch(models.Model):
    """A batch that is not processed: pending (the workers' queue) or failed (set aside for
    an operator). Every batch stored as pending or failed gets its row in the same statement
    (a trigger, migration 0006); the worker deletes it in the transaction that marks the batch
    processed. Kept apart from IngestBatch so that the queue's indexes are small and marking
    a batch processed writes no index entry of the wide batch table. ``received_at`` and
    ``attempts`` are copies of the batch's (the queue's indexes need them here); the reaper
    writes both copies, and the batch's stays as the record once the queue row is gone."""

    batch = models.OneToOneField(
        IngestBatch, on_delete=models.CASCADE, primary_key=True, related_name="queued"
    )
    received_at = models.DateTimeField()
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Workers lost (killed, hung) while processing it."
    )
    failed = models.BooleanField(default=False)

    class Meta:
        ordering: ClassVar = ["received_at", "batch"]
        indexes: ClassVar = [
            # The workers' queue, oldest first.
            models.Index(
                fields=["received_at", "batch"],
                name="telemetry_queue_next",
                condition=models.Q(failed=False),
            ),
            # Batches whose worker was lost: each is processed alone (rarely any).
            models.Index(
                fields=["received_at", "batch"],
                name="telemetry_queue_suspect",
                condition=models.Q(failed=False, attempts__gt=0),
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.batch_id} {'failed' if self.failed else 'queued'}"


class IngestClaim(models.Model):
    """A worker's chunk of batches in flight: which worker took which batches, and when.

    Written and committed (on a connection of its own) just before the chunk's transaction
    writes the batches' windows, locked by that transaction, and deleted by its commit. So a
    claim row that is *not* locked belongs to a worker that died (or hung past
    ``TELEMETRY_CLAIM_TIMEOUT_S``) with these batches half done: the next claim counts a lost
    attempt on each of them and deletes the row. The batches themselves are never written
    until they are processed — one write per batch."""

    worker = models.CharField(max_length=200)
    claimed_at = models.DateTimeField(default=timezone.now)
    batch_ids = ArrayField(models.BigIntegerField())

    class Meta:
        ordering: ClassVar = ["claimed_at"]

    def __str__(self) -> str:
        return f"claim {self.pk} by {self.worker}: {len(self.batch_ids)} batches"


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
        # No index on last_seen_at: every chunk updates it for its nodes, and an indexed
        # column would make each of those updates write index entries (not HOT). Beat's
        # staleness check reads the whole table, one row per node, once a minute.

    def __str__(self) -> str:
        return f"{self.node_id} ({'stale' if self.stale else 'fresh'})"

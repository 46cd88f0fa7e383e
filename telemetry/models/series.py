"""What the telemetry says, after validation: windows, events, GPU state, hourly rollups.

Windows live in a table partitioned by day (migration 0002 creates it; this model only reads
it). They are written with binary COPY by the worker, never through the ORM.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils import timezone

from fleet.models import Gpu, Node


class GpuState(models.TextChoices):
    UP = "up", "Up"
    DEGRADED = "degraded", "Degraded"
    DOWN = "down", "Down"
    NO_DATA = "no_data", "No data"


class UtilMethod(models.TextChoices):
    BUFFER = "buffer", "Driver sample buffer"
    INSTANT = "instant", "Instantaneous reads"
    MIXED = "mixed", "Buffer with instantaneous fallback"


class TelemetryWindow(models.Model):
    """One GPU, one minute (``window_start`` aligned to the minute, UTC)."""

    pk = models.CompositePrimaryKey("gpu", "window_start")
    # No foreign keys on this table: a per-row FK check would halve COPY throughput, and the
    # worker only writes GPUs it has just found placed on the sending node.
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    window_start = models.DateTimeField()
    node = models.ForeignKey(
        Node, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    batch_id = models.BigIntegerField(help_text="The IngestBatch it came in.")
    samples_ok = models.SmallIntegerField()
    samples_expected = models.SmallIntegerField()
    # The seconds of the minute the agent observed: [window_start + from, window_start + to).
    # Only these count as up or down; the rest of the minute is no_data.
    observed_from = models.SmallIntegerField(default=0)
    observed_to = models.SmallIntegerField(default=60)
    util_method = models.CharField(  # noqa: DJ001 - null: no utilization was measured
        max_length=8,
        choices=UtilMethod.choices,
        null=True,
        help_text="How the utilization was measured; null when none was.",
    )
    state = models.CharField(max_length=8, choices=GpuState.choices)
    state_reason = models.TextField(null=True)  # noqa: DJ001
    util_gpu_min = models.FloatField(null=True)
    util_gpu_avg = models.FloatField(null=True)
    util_gpu_max = models.FloatField(null=True)
    util_mem_avg = models.FloatField(null=True)
    util_mem_max = models.FloatField(null=True)
    mem_used_max_bytes = models.BigIntegerField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    power_avg_w = models.FloatField(null=True)
    power_max_w = models.FloatField(null=True)
    energy_mj = models.BigIntegerField(null=True, help_text="Cumulative counter, last value.")
    temp_avg_c = models.FloatField(null=True)
    temp_max_c = models.FloatField(null=True)
    clock_sm_avg_mhz = models.FloatField(null=True)
    clock_mem_avg_mhz = models.FloatField(null=True)
    throttle_reasons = models.BigIntegerField(null=True)
    ecc_corrected = models.BigIntegerField(null=True)
    ecc_uncorrected = models.BigIntegerField(null=True)
    remapped_rows_correctable = models.IntegerField(null=True)
    remapped_rows_uncorrectable = models.IntegerField(null=True)
    remapped_rows_pending = models.BooleanField(null=True)
    retired_pages = models.IntegerField(null=True)
    pcie_replays = models.BigIntegerField(null=True)
    recovery_action = models.SmallIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "telemetry_window"
        ordering: ClassVar = ["gpu", "window_start"]

    def __str__(self) -> str:
        return f"{self.gpu_id} @ {self.window_start:%Y-%m-%d %H:%M}"


class TelemetryEvent(models.Model):
    """A discrete, timestamped happening on a node (XID, GPU lost, NVML unavailable, …)."""

    class Kind(models.TextChoices):
        XID = "xid", "XID"
        GPU_LOST = "gpu_lost", "GPU lost"
        GPU_RECOVERED = "gpu_recovered", "GPU recovered"
        GPU_MISSING = "gpu_missing", "GPU missing"
        GPU_APPEARED = "gpu_appeared", "GPU appeared"
        NVML_UNAVAILABLE = "nvml_unavailable", "NVML unavailable"
        NVML_AVAILABLE = "nvml_available", "NVML available"
        NVML_STALL = "nvml_stall", "NVML stall"
        SPOOL_DROPPED = "spool_dropped", "Spool dropped"
        SPOOL_QUARANTINED = "spool_quarantined", "Spool quarantined"
        BATCH_REJECTED = "batch_rejected", "Batch rejected"

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    event_id = models.UUIDField()
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, null=True, related_name="+")
    gpu_uuid = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    occurred_at = models.DateTimeField()
    xid = models.IntegerField(null=True)
    detail = models.JSONField(default=dict)
    # A plain id, not a foreign key: raw batches are deleted by retention, events stay.
    batch_id = models.BigIntegerField(help_text="The IngestBatch it came in.")

    class Meta:
        ordering: ClassVar = ["-occurred_at"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["node", "event_id"], name="telemetry_event_once"),
        ]
        indexes: ClassVar = [models.Index(fields=["gpu", "occurred_at"])]

    def __str__(self) -> str:
        return f"{self.kind} on {self.node_id} at {self.occurred_at:%Y-%m-%d %H:%M:%S}"


class GpuStateTransition(models.Model):
    """From ``at`` on, the telemetry says the GPU was in ``state``, until its next transition.

    Derived from windows (and from staleness: ``no_data``), dated when the telemetry says the
    change happened, and recomputed when late windows fill a gap.
    """

    # No foreign key in the database, as on windows: the derived pass writes only GPUs whose
    # windows it read, and the deferred per-row checks cost ~6 % of its CPU (issue 22).
    # No index of its own either: the unique (gpu, at) serves every lookup by GPU.
    gpu = models.ForeignKey(
        Gpu, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False
    )
    state = models.CharField(max_length=8, choices=GpuState.choices)
    reason = models.TextField(blank=True)
    at = models.DateTimeField()
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["gpu", "at"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["gpu", "at"], name="telemetry_transition_once"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id} → {self.state} at {self.at:%Y-%m-%d %H:%M:%S}"


class HourlyRollup(models.Model):
    """One GPU, one UTC hour, recomputed from its windows whenever they change. Kept forever.

    The unique (gpu, hour) index also carries the figures the accounting sums (state seconds,
    busy seconds, energy), so a GPU's range is read from the index alone (index-only scan)
    instead of one heap page per hour: rollups are written hour by hour for every GPU, so one
    GPU's rows sit on as many pages as it has hours. It also serves lookups by GPU alone.
    """

    # No foreign key in the database, as on windows and transitions (see there).
    gpu = models.ForeignKey(
        Gpu, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False
    )
    hour = models.DateTimeField()
    windows = models.PositiveIntegerField()
    seconds_up = models.PositiveIntegerField()
    seconds_degraded = models.PositiveIntegerField()
    seconds_down = models.PositiveIntegerField()
    # Exact decimals, so an incremental update and a rebuild agree to the last digit.
    util_gpu_seconds = models.DecimalField(
        max_digits=20,
        decimal_places=3,
        help_text="Σ utilization (%) x seconds over up and degraded windows.",
    )
    energy_kwh = models.DecimalField(max_digits=20, decimal_places=9)
    temp_max_c = models.FloatField(null=True)
    ecc_corrected = models.BigIntegerField(help_text="Counter increase within the hour.")
    ecc_uncorrected = models.BigIntegerField(help_text="Counter increase within the hour.")
    xid_events = models.PositiveIntegerField()
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar = ["gpu", "hour"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["gpu", "hour"],
                include=[
                    "seconds_up",
                    "seconds_degraded",
                    "seconds_down",
                    "util_gpu_seconds",
                    "energy_kwh",
                ],
                name="telemetry_rollup_once",
            ),
        ]
        indexes: ClassVar = [models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.hour:%Y-%m-%d %H}:00"


class DailyRollup(models.Model):
    """One GPU, one UTC day: the sums of that day's hourly rollups that accounting needs.

    Always equal to ``GROUP BY gpu, day`` of ``HourlyRollup`` (migration 0011): statement-level
    triggers on the hourly table recompute every (GPU, day) a statement touched from the hourly
    rows themselves — whoever writes them (the derived pass, a rebuild, a bulk load, the ORM) —
    and never patch a sum with a delta. A month close reads ~310k of these rows for 10,000 GPUs
    instead of summing 7.4M hourly ones (docs/scaling.md, goal 4a).
    """

    pk = models.CompositePrimaryKey("gpu", "day")
    # No foreign key in the database, as on hourly rollups (see there).
    gpu = models.ForeignKey(
        Gpu, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False
    )
    day = models.DateField(help_text="The UTC day.")
    seconds_up = models.IntegerField(
        help_text="Σ up and degraded seconds: what accounting counts as telemetry-up."
    )
    seconds_down = models.IntegerField()
    # Sums of the hourly decimals, exact (one hour's maximum times 24 fits).
    util_gpu_seconds = models.DecimalField(
        max_digits=22,
        decimal_places=3,
        help_text="Σ utilization (%) x seconds over up and degraded windows.",
    )
    energy_kwh = models.DecimalField(max_digits=22, decimal_places=9)

    class Meta:
        ordering: ClassVar = ["gpu", "day"]
        # A close reads every GPU's days of a month: by day. The key serves reads by GPU.
        indexes: ClassVar = [models.Index(fields=["day"])]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.day:%Y-%m-%d}"

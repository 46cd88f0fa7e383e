"""Telemetry: node credentials, raw batches, windows, events, GPU state and rollups."""

from telemetry.models.credentials import BootstrapToken, NodeCredential
from telemetry.models.ingest import (
    BatchBody,
    BatchStatus,
    IngestBatch,
    IngestClaim,
    NodeStatus,
    QueuedBatch,
    RejectedRecord,
)
from telemetry.models.series import (
    DailyRollup,
    GpuState,
    GpuStateTransition,
    HourlyRollup,
    TelemetryEvent,
    TelemetryWindow,
    UtilMethod,
)

__all__ = [
    "BatchBody",
    "BatchStatus",
    "BootstrapToken",
    "DailyRollup",
    "GpuState",
    "GpuStateTransition",
    "HourlyRollup",
    "IngestBatch",
    "IngestClaim",
    "NodeCredential",
    "NodeStatus",
    "QueuedBatch",
    "RejectedRecord",
    "TelemetryEvent",
    "TelemetryWindow",
    "UtilMethod",
]

"""Discrete, timestamped events: dated when they happened, each with its own UUIDv7."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .timefmt import rfc3339_ms
from .uuid7 import uuid7

EventKind = Literal[
    "xid",
    "gpu_lost",
    "gpu_recovered",
    "gpu_missing",
    "gpu_appeared",
    "nvml_unavailable",
    "nvml_available",
    "nvml_stall",
    "spool_dropped",
    "spool_quarantined",
    "batch_rejected",
]

EVENT_KINDS: tuple[str, ...] = EventKind.__args__  # type: ignore[attr-defined]


@dataclass(slots=True)
class AgentEvent:
    kind: EventKind
    occurred_at: float
    gpu_uuid: str | None = None
    xid: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    event_id: str = ""

    def __post_init__(self) -> None:
        if not self.event_id:
            # The id carries the time it happened, so ids sort like the events.
            self.event_id = str(uuid7(int(self.occurred_at * 1000)))

    def to_wire(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "gpu_uuid": self.gpu_uuid,
            "kind": self.kind,
            "occurred_at": rfc3339_ms(self.occurred_at),
            "xid": self.xid,
            "detail": self.detail,
        }

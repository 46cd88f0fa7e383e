"""Is telemetry for a time range still on its way? Closing and publishing refuse while it is."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count

from telemetry.models import QueuedBatch
from telemetry.selectors import derived_pending


@dataclass(frozen=True)
class PendingTelemetry:
    pending: int  # being processed included
    failed: int
    derived: int = 0  # (GPU, hour) marks whose transitions and rollups are not recomputed yet

    @property
    def any(self) -> bool:
        return bool(self.pending or self.failed or self.derived)

    def describe(self) -> str:
        parts = [
            f"{n} {name}"
            for name, n in (
                ("pending", self.pending),
                ("failed", self.failed),
                ("GPU-hours awaiting their rollups", self.derived),
            )
            if n
        ]
        return ", ".join(parts)


def telemetry_pending(*, start: datetime, end: datetime) -> PendingTelemetry:
    """Unprocessed ingest batches that may hold windows or events in ``[start, end)``.

    A batch's windows start at most ``TELEMETRY_MAX_FUTURE_S`` after it was received, so a
    batch received earlier than that before ``start`` cannot reach into the range; one
    received after ``end`` can (late delivery from an agent's spool). A processed batch
    leaves marks for its GPU-hours until the derived pass has recomputed their transitions
    and rollups; those count too (``telemetry.selectors.derived_pending``), as a statement
    computed from stale rollups would be wrong.
    """
    since = start - timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)
    counts = dict(
        QueuedBatch.objects.filter(received_at__gte=since)
        .values_list("failed")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return PendingTelemetry(
        pending=counts.get(False, 0),
        failed=counts.get(True, 0),
        derived=derived_pending(start=start, end=end),
    )

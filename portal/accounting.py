"""The accounting time states of a user's GPUs, as the portal shows them.

Inputs are loaded in bulk for many GPUs at once — lifecycle transitions (in service), the
user's holdings, placements, maintenance windows, incidents and the telemetry's up and down
runs (state transitions, each ended at the last second its windows observed: later time is
no_data until windows arrive) — and every second is assigned by
``billing.engine.intervals.partition_states``, so the portal and the statements apply one
precedence: maintenance → down → up → no_data. Only seconds the
user's accounts held the GPU count: before a purchase and after a sale the GPU is not theirs.

Utilization comes from hourly rollups (Σ utilization × seconds over up and degraded minutes):
an hour's sum is scaled by the share of its telemetry-up seconds that accounting counts as
``up`` (not in maintenance, an incident, or outside the holding), exact whenever an hour is
wholly in or out.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from django.db.models import Q

from accounts.models import User
from billing.engine.intervals import (
    Interval,
    StatePartition,
    TimeState,
    intersect,
    normalize,
    partition_states,
)
from fleet.models import (
    Gpu,
    Incident,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Placement,
)
from portal.access import holdings_for_user
from telemetry.models import GpuState, HourlyRollup
from telemetry.selectors import gpu_telemetry_runs

HOUR = timedelta(hours=1)
UP_STATES = frozenset({GpuState.UP, GpuState.DEGRADED})


@dataclass
class GpuInputs:
    """One GPU's accounting inputs over a window, already clipped to it."""

    in_service: list[Interval] = field(default_factory=list)
    held: list[Interval] = field(default_factory=list)
    maintenance: list[Interval] = field(default_factory=list)
    incidents: list[Interval] = field(default_factory=list)
    telemetry_up: list[Interval] = field(default_factory=list)
    telemetry_down: list[Interval] = field(default_factory=list)

    def partition(self) -> StatePartition:
        return partition_states(
            in_service=intersect(self.in_service, self.held),
            maintenance=self.maintenance,
            down=normalize([*self.telemetry_down, *self.incidents]),
            up=self.telemetry_up,
        )


@dataclass(frozen=True)
class Figures:
    """Seconds by state and busy seconds of one GPU (or a sum of GPUs) over a period."""

    in_service_s: int = 0
    maintenance_s: int = 0
    down_s: int = 0
    up_s: int = 0
    no_data_s: int = 0
    busy_s: Decimal = Decimal(0)

    @property
    def availability(self) -> Decimal | None:
        """up ÷ (in-service − maintenance), 0–1; None when there is no such time."""
        denominator = self.in_service_s - self.maintenance_s
        return Decimal(self.up_s) / denominator if denominator else None

    @property
    def utilization(self) -> Decimal | None:
        """Time-weighted mean utilization over up seconds, 0–1; None without up time."""
        return self.busy_s / self.up_s if self.up_s else None

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.in_service_s + other.in_service_s,
            self.maintenance_s + other.maintenance_s,
            self.down_s + other.down_s,
            self.up_s + other.up_s,
            self.no_data_s + other.no_data_s,
            self.busy_s + other.busy_s,
        )


def seconds_per_hour(intervals: Iterable[Interval]) -> dict[datetime, int]:
    """Seconds of (normalized) intervals falling in each UTC hour they touch."""
    out: dict[datetime, int] = defaultdict(int)
    for interval in normalize(intervals):
        cursor = interval.start
        while cursor < interval.end:
            hour = cursor.replace(minute=0, second=0, microsecond=0)
            step = min(hour + HOUR, interval.end)
            out[hour] += int((step - cursor).total_seconds())
            cursor = step
    return out


def _clip(start: datetime, end: datetime | None, window: Interval) -> Interval | None:
    begins = max(start, window.start)
    ends = min(end or window.end, window.end)
    return Interval(begins, ends) if begins < ends else None


def load_inputs(*, user: User, gpus: Sequence[Gpu], window: Interval) -> dict[Any, GpuInputs]:
    """Each GPU's inputs over ``window`` (aware UTC, end usually "now"), in a fixed number of
    queries whatever the number of GPUs."""
    ids = [gpu.pk for gpu in gpus]
    inputs: dict[Any, GpuInputs] = {pk: GpuInputs() for pk in ids}
    if not ids:
        return inputs
    start, end = window

    transitions = LifecycleTransition.objects.filter(gpu_id__in=ids, at__lt=end).order_by(
        "gpu_id", "at"
    )
    for gpu_id, rows in itertools.groupby(
        transitions.values_list("gpu_id", "at", "state"), key=_first
    ):
        ordered = list(rows)
        for (_, at, state), following in zip(ordered, [*ordered[1:], None], strict=True):
            piece = _clip(at, following[1] if following else None, window)
            if piece is not None and state == LifecycleState.IN_SERVICE:
                inputs[gpu_id].in_service.append(piece)

    for gpu_id, valid_from, valid_to in (
        holdings_for_user(user=user)
        .filter(gpu_id__in=ids, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list("gpu_id", "valid_from", "valid_to")
    ):
        piece = _clip(valid_from, valid_to, window)
        if piece is not None:
            inputs[gpu_id].held.append(piece)

    load_scoped(inputs, ids=ids, window=window)
    _load_telemetry(inputs, ids=ids, window=window)
    return inputs


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


def load_scoped(inputs: dict[Any, GpuInputs], *, ids: list[Any], window: Interval) -> None:
    """Maintenance and incident intervals per GPU: a GPU scope directly, other scopes while
    the GPU was placed there. Cancelled windows never started, so they claim nothing."""
    start, end = window
    placements = list(
        Placement.objects.filter(gpu_id__in=ids, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .values_list(
            "gpu_id",
            "node_id",
            "node__cluster_id",
            "node__cluster__site_id",
            "valid_from",
            "valid_to",
        )
    )
    windows = MaintenanceWindow.objects.filter(
        cancelled_at__isnull=True, starts_at__lt=end, ends_at__gt=start
    )
    incidents = Incident.objects.filter(started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    )
    scoped: list[tuple[str, Any, Any, Any, Any, datetime, datetime | None]] = [
        ("maintenance", *row)
        for row in windows.values_list(
            "gpu_id", "node_id", "cluster_id", "site_id", "starts_at", "ends_at"
        )
    ]
    scoped += [
        ("incidents", *row)
        for row in incidents.values_list(
            "gpu_id", "node_id", "cluster_id", "site_id", "started_at", "ended_at"
        )
    ]
    for kind, gpu_id, node_id, cluster_id, site_id, begins, ends in scoped:
        event = _clip(begins, ends, window)
        if event is None:
            continue
        if gpu_id is not None:
            if gpu_id in inputs:
                getattr(inputs[gpu_id], kind).append(event)
            continue
        for p_gpu, p_node, p_cluster, p_site, p_from, p_to in placements:
            if (node_id, cluster_id, site_id) == (None, None, None):
                continue
            if p_node == node_id or p_cluster == cluster_id or p_site == site_id:
                piece = _clip(max(p_from, event.start), p_to and min(p_to, event.end), event)
                if piece is not None:
                    getattr(inputs[p_gpu], kind).append(piece)


def _load_telemetry(inputs: dict[Any, GpuInputs], *, ids: list[Any], window: Interval) -> None:
    """The telemetry's up and down runs, each ended at the last second its windows observed
    (``telemetry.selectors.gpu_telemetry_runs``): nothing is carried beyond the data."""
    runs = gpu_telemetry_runs(gpu_ids=ids, start=window.start, end=window.end)
    for gpu_id, gpu_runs in runs.items():
        for run in gpu_runs:
            piece = Interval(run.start, run.end)
            if run.state in UP_STATES:
                inputs[gpu_id].telemetry_up.append(piece)
            elif run.state == GpuState.DOWN:
                inputs[gpu_id].telemetry_down.append(piece)


class HourFigures(NamedTuple):
    """The columns of one hourly rollup the portal reads. Plain tuples, not model instances:
    a month of 100 GPUs is ~50,000 rollups, and building models cost more than the rest of the
    overview (measured: 0.46 s of 1.2 s)."""

    gpu_id: Any
    hour: datetime
    windows: int
    seconds_up: int
    seconds_degraded: int
    seconds_down: int
    util_gpu_seconds: Decimal
    energy_kwh: Decimal
    temp_max_c: float | None


def rollups(*, ids: Sequence[Any], window: Interval) -> dict[Any, list[HourFigures]]:
    """Hourly rollups per GPU for the hours that overlap ``window``, oldest first."""
    first_hour = window.start.replace(minute=0, second=0, microsecond=0)
    out: dict[Any, list[HourFigures]] = defaultdict(list)
    rows = (
        HourlyRollup.objects.filter(gpu_id__in=ids, hour__gte=first_hour, hour__lt=window.end)
        .order_by("gpu_id", "hour")
        .values_list(*HourFigures._fields)
    )
    for row in rows:
        rollup = HourFigures(*row)
        out[rollup.gpu_id].append(rollup)
    return out


def busy_seconds(*, up: Sequence[Interval], hours: Sequence[HourFigures]) -> Decimal:
    """Σ utilization × accounting-up seconds, hour by hour (see the module's docstring)."""
    up_by_hour = seconds_per_hour(up)
    busy = Decimal(0)
    for rollup in hours:
        telemetry_up = rollup.seconds_up + rollup.seconds_degraded
        counted = up_by_hour.get(rollup.hour.astimezone(UTC), 0)
        if telemetry_up and counted:
            share = min(Decimal(1), Decimal(counted) / telemetry_up)
            busy += rollup.util_gpu_seconds / 100 * share
    return busy


def figures(*, partition: StatePartition, hours: Sequence[HourFigures]) -> Figures:
    return Figures(
        in_service_s=partition.in_service_seconds,
        maintenance_s=partition.seconds(TimeState.MAINTENANCE),
        down_s=partition.seconds(TimeState.DOWN),
        up_s=partition.seconds(TimeState.UP),
        no_data_s=partition.seconds(TimeState.NO_DATA),
        busy_s=busy_seconds(up=partition.up, hours=hours),
    )


def figures_for(*, user: User, gpus: Sequence[Gpu], window: Interval) -> dict[Any, Figures]:
    """Each GPU's figures over ``window``, by the accounting precedence."""
    inputs = load_inputs(user=user, gpus=gpus, window=window)
    hourly = rollups(ids=list(inputs), window=window)
    return {
        pk: figures(partition=gpu_inputs.partition(), hours=hourly.get(pk, []))
        for pk, gpu_inputs in inputs.items()
    }

"""Reads behind the portal's pages, always from the point of view of the user asking."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet

from accounts.models import User
from billing.engine.intervals import Interval
from billing.engine.usage import Measure
from billing.selectors.availability import (
    HeldUsage,
    as_decimal,
    held_availability,
    measure_sum,
    shown_energy_kwh,
)
from fleet.models import (
    Gpu,
    GpuModel,
    Incident,
    LifecycleState,
    MaintenanceWindow,
    Ownership,
    Placement,
)
from fleet.selectors import gpus_with_whereabouts
from portal.access import (
    gpus_for_user,
    holdings_for_user,
    incidents_for_user,
    maintenance_for_user,
    owner_ids_for_user,
)
from telemetry.models import GpuState, HourlyRollup
from telemetry.selectors import NO_TELEMETRY, StateNow, gpu_states_now

HOUR = timedelta(hours=1)
TIMELINE_DAYS = 30


@dataclass(frozen=True)
class Period:
    """A calendar month, half-open; ``end`` stops at now while the month is running."""

    start: datetime
    end: datetime
    month_end: datetime

    @property
    def label(self) -> str:
        return f"{self.start:%B %Y}"

    @property
    def key(self) -> str:
        return f"{self.start:%Y-%m}"

    @property
    def running(self) -> bool:
        return self.end < self.month_end

    @property
    def interval(self) -> Interval:
        return Interval(self.start, self.end)


def _month_after(start: datetime) -> datetime:
    return (start + timedelta(days=32)).replace(day=1)


def month_period(*, now: datetime, key: str | None = None, months_back: int = 12) -> Period:
    """The month ``key`` (YYYY-MM) if it is one of the last ``months_back``, else this month."""
    this_month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = this_month
    for candidate in recent_months(now=now, count=months_back):
        if candidate.key == key:
            start = candidate.start
    month_end = _month_after(start)
    return Period(start=start, end=min(month_end, now.replace(microsecond=0)), month_end=month_end)


def recent_months(*, now: datetime, count: int = 12) -> list[Period]:
    out: list[Period] = []
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for _ in range(count):
        month_end = _month_after(start)
        out.append(Period(start, min(month_end, now.replace(microsecond=0)), month_end))
        start = (start - timedelta(days=1)).replace(day=1)
    return out


def telemetry_now(*, ids: Sequence[Any], now: datetime) -> dict[Any, StateNow]:
    """The telemetry state each GPU is in now, and when it was last seen: a GPU whose
    telemetry ended is no_data since its last observed second, whatever its newest
    transition says (``telemetry.selectors.gpu_states_now``). Absent: no telemetry yet."""
    return gpu_states_now(gpu_ids=list(ids), now=now)


def shares_now(*, user: User, ids: Sequence[Any], now: datetime) -> dict[Any, int]:
    """The basis points the user's accounts hold of each GPU now."""
    shares: Counter[Any] = Counter()
    for gpu_id, bps in (
        holdings_for_user(user=user)
        .filter(gpu_id__in=ids, valid_from__lte=now)
        .exclude(valid_to__lte=now)
        .values_list("gpu_id", "share_bps")
    ):
        shares[gpu_id] += bps
    return dict(shares)


# ---- figures ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """Seconds by state, utilization and energy over the seconds the user's accounts held a
    GPU (or several, summed), measured by billing's own selectors
    (``billing.selectors.availability.held_availability``): the figures a statement's lines
    show for the same seconds, rounded as they are (ratios and kWh to 6 places)."""

    measure: Measure = dataclasses.field(default_factory=lambda: measure_sum(()))
    # Σ of each run's energy as its statement line shows it (kWh to 6 places).
    energy_kwh: Decimal = Decimal("0.000000")

    @classmethod
    def of(cls, usages: Iterable[HeldUsage]) -> Figures:
        listed = list(usages)
        return cls(
            measure_sum(u.total for u in listed),
            shown_energy_kwh(r.measure for u in listed for r in u.runs),
        )

    @property
    def in_service_s(self) -> int:
        return self.measure.in_service_s

    @property
    def maintenance_s(self) -> int:
        return self.measure.maintenance_s

    @property
    def down_s(self) -> int:
        return self.measure.down_s

    @property
    def up_s(self) -> int:
        return self.measure.up_s

    @property
    def no_data_s(self) -> int:
        return self.measure.no_data_s

    @property
    def availability(self) -> Decimal | None:
        """up ÷ (in-service − maintenance), 0–1, to 6 places; None when there is no such time."""
        return as_decimal(self.measure.availability)

    @property
    def utilization(self) -> Decimal | None:
        """Time-weighted mean utilization over up seconds, 0–1, to 6 places; None without up."""
        return as_decimal(self.measure.utilization)


def held_figures(
    *, user: User, gpu_ids: Sequence[Any], window: Interval, cuts: Iterable[datetime] = ()
) -> dict[Any, HeldUsage]:
    """Each GPU's usage over ``window`` while the user's accounts held it (see ``Figures``)."""
    if window.end <= window.start:  # the first second of a month: nothing counted yet
        return {pk: HeldUsage(pk, [], measure_sum(()), None) for pk in gpu_ids}
    owners = list(owner_ids_for_user(user=user).values_list("owner_id", flat=True))
    return held_availability(
        gpu_ids=list(gpu_ids), owner_ids=owners, start=window.start, end=window.end, cuts=cuts
    )


def gpu_ids_held_in(*, user: User, window: Interval) -> list[Any]:
    """The GPUs the user's accounts held a share of at some second of ``window``."""
    return list(
        holdings_for_user(user=user)
        .filter(valid_from__lt=window.end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=window.start))
        .values_list("gpu_id", flat=True)
        .distinct()
    )


def seconds_per_hour(intervals: Iterable[Interval]) -> dict[datetime, int]:
    """Seconds of intervals falling in each UTC hour they touch."""
    out: dict[datetime, int] = defaultdict(int)
    for interval in intervals:
        cursor = interval.start
        while cursor < interval.end:
            hour = cursor.replace(minute=0, second=0, microsecond=0)
            step = min(hour + HOUR, interval.end)
            out[hour] += int((step - cursor).total_seconds())
            cursor = step
    return out


# ---- fleet overview -------------------------------------------------------------------------


@dataclass(frozen=True)
class Overview:
    period: Period
    gpus_held: int
    by_lifecycle: list[tuple[str, int]]
    by_telemetry: list[tuple[str, int]]
    figures: Figures
    open_incidents: list[Incident]
    upcoming_maintenance: list[MaintenanceWindow]


def fleet_overview(*, user: User, period: Period, now: datetime) -> Overview:
    held_now = list(gpus_for_user(user=user, held_at=now).only("pk", "lifecycle_state"))
    lifecycle = Counter(gpu.lifecycle_state for gpu in held_now)
    states = telemetry_now(ids=[gpu.pk for gpu in held_now], now=now)
    telemetry = Counter(states.get(gpu.pk, NO_TELEMETRY).state for gpu in held_now)
    in_period = gpu_ids_held_in(user=user, window=period.interval)
    total = Figures.of(held_figures(user=user, gpu_ids=in_period, window=period.interval).values())
    return Overview(
        period=period,
        gpus_held=len(held_now),
        by_lifecycle=[
            (label, lifecycle[value]) for value, label in LifecycleState.choices if lifecycle[value]
        ],
        by_telemetry=[
            (label, telemetry[value]) for value, label in GpuState.choices if telemetry[value]
        ],
        figures=total,
        open_incidents=list(
            incidents_for_user(user=user).filter(ended_at__isnull=True).order_by("-started_at")
        ),
        upcoming_maintenance=list(
            maintenance_for_user(user=user)
            .filter(cancelled_at__isnull=True, ends_at__gt=now)
            .order_by("starts_at")
        ),
    )


# ---- GPU list -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuFilters:
    lifecycle: str = ""
    telemetry: str = ""
    cluster: str = ""  # "site/cluster"
    model: str = ""  # GpuModel id as text
    held: str = "now"  # now | ever
    sort: str = "serial"  # serial | -serial | availability | -availability | …


SORTS = ("serial", "availability", "utilization")


@dataclass(frozen=True)
class GpuRow:
    gpu: Gpu
    cluster: str
    node: str
    slot: int | None
    telemetry: str
    last_seen: datetime | None  # the end of the last second its telemetry covers
    share_bps: int
    figures: Figures


def cluster_choices(*, user: User, now: datetime) -> list[str]:
    """Where the user's GPUs are now, as "site/cluster"."""
    rows = gpus_with_whereabouts(at=now).filter(pk__in=gpus_for_user(user=user).values("pk"))
    return sorted(
        {
            f"{r['site_code']}/{r['cluster_code']}"
            for r in rows.values("site_code", "cluster_code")  # type: ignore[misc]
            if r["cluster_code"]
        }
    )


def model_choices(*, user: User) -> QuerySet[GpuModel]:
    return GpuModel.objects.filter(gpus__in=gpus_for_user(user=user)).distinct().order_by("name")


def gpu_rows(*, user: User, filters: GpuFilters, period: Period, now: datetime) -> list[GpuRow]:
    """The user's GPUs matching ``filters``, sorted, with this period's figures."""
    base = gpus_for_user(user=user, held_at=now if filters.held != "ever" else None)
    gpus = gpus_with_whereabouts(at=now).filter(pk__in=base.values("pk"))
    if filters.lifecycle:
        gpus = gpus.filter(lifecycle_state=filters.lifecycle)
    if filters.model.isdigit():
        gpus = gpus.filter(model_id=int(filters.model))
    if "/" in filters.cluster:
        site, cluster = filters.cluster.split("/", 1)
        gpus = gpus.filter(site_code=site, cluster_code=cluster)  # type: ignore[misc]
    listed = list(gpus.order_by("serial"))
    states = telemetry_now(ids=[g.pk for g in listed], now=now)
    if filters.telemetry:
        listed = [g for g in listed if states.get(g.pk, NO_TELEMETRY).state == filters.telemetry]
    held = held_figures(user=user, gpu_ids=[g.pk for g in listed], window=period.interval)
    shares = shares_now(user=user, ids=[g.pk for g in listed], now=now)
    rows = [
        GpuRow(
            gpu=g,
            cluster=f"{g.site_code}/{g.cluster_code}" if g.cluster_code else "",  # type: ignore[attr-defined]
            node=g.hostname or "",  # type: ignore[attr-defined]
            slot=g.slot,  # type: ignore[attr-defined]
            telemetry=states.get(g.pk, NO_TELEMETRY).state,
            last_seen=states.get(g.pk, NO_TELEMETRY).last_seen,
            share_bps=shares.get(g.pk, 0),
            figures=Figures.of([held[g.pk]]),
        )
        for g in listed
    ]
    key = filters.sort.lstrip("-")
    descending = filters.sort.startswith("-")
    if key in ("availability", "utilization"):
        # GPUs without a figure go last either way; ties by serial.
        present = [r for r in rows if getattr(r.figures, key) is not None]
        absent = [r for r in rows if getattr(r.figures, key) is None]
        present.sort(key=lambda r: r.gpu.serial)
        present.sort(key=lambda r: getattr(r.figures, key), reverse=descending)
        return present + absent
    return list(reversed(rows)) if descending else rows


# ---- one GPU --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HourState:
    hour: datetime
    held: int  # seconds of the hour the user's accounts held it while in service
    maintenance: int
    down: int
    up: int
    no_data: int

    @property
    def state(self) -> str:
        """The hour's state for the strip: the one with most seconds (ties by precedence);
        ``not_counted`` when no second of it counted for the user."""
        if not self.held:
            return "not_counted"
        ranked = [
            ("maintenance", self.maintenance),
            ("down", self.down),
            ("up", self.up),
            ("no_data", self.no_data),
        ]
        return max(ranked, key=lambda item: item[1])[0]


@dataclass(frozen=True)
class HourMetrics:
    hour: datetime
    utilization: Decimal | None  # percent
    power_w: Decimal | None  # mean over the minutes reported
    temp_max_c: float | None


@dataclass(frozen=True)
class DaySummary:
    day: datetime
    up_s: int
    down_s: int
    maintenance_s: int
    no_data_s: int
    utilization: Decimal | None
    power_w: Decimal | None
    temp_max_c: float | None


@dataclass(frozen=True)
class GpuDetail:
    gpu: Gpu
    window: Interval
    figures: Figures
    hours: list[HourState]
    metrics: list[HourMetrics]
    days: list[DaySummary]
    telemetry: str
    telemetry_since: datetime | None
    last_seen: datetime | None  # the end of the last second its telemetry covers
    share_bps: int


def timeline_window(*, now: datetime, days: int = TIMELINE_DAYS) -> Interval:
    """The last ``days`` × 24 whole hours, ending with the hour now running (cut at now)."""
    this_hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return Interval(this_hour + HOUR - timedelta(days=days), now.replace(microsecond=0))


def gpu_detail(*, user: User, gpu: Gpu, now: datetime) -> GpuDetail:
    window = timeline_window(now=now)
    starts: list[datetime] = []
    cursor = window.start
    while cursor < window.end:
        starts.append(cursor)
        cursor += HOUR
    held = held_figures(user=user, gpu_ids=[gpu.pk], window=window, cuts=starts)[gpu.pk]
    state = telemetry_now(ids=[gpu.pk], now=now).get(gpu.pk, NO_TELEMETRY)
    hours: list[HourState] = []
    busy: dict[datetime, Decimal] = {}
    for start in starts:
        m = held.measure(Interval(start, min(start + HOUR, window.end)))
        hours.append(
            HourState(
                hour=start,
                held=m.in_service_s,
                maintenance=m.maintenance_s,
                down=m.down_s,
                up=m.up_s,
                no_data=m.no_data_s,
            )
        )
        busy[start] = m.busy_s
    held_hours = set(seconds_per_hour(r.interval for r in held.runs))
    up_s = {h.hour: h.up for h in hours}
    metrics = []
    for row in _hour_telemetry(gpu=gpu, window=window):
        hour = row[0].astimezone(UTC)
        if hour in held_hours:
            metrics.append(_metrics(row, hour, busy.get(hour, Decimal(0)), up_s.get(hour, 0)))
    return GpuDetail(
        gpu=gpu,
        window=window,
        figures=Figures.of([held]),
        hours=hours,
        metrics=metrics,
        days=_days(hours, metrics, busy),
        telemetry=state.state,
        telemetry_since=state.since,
        last_seen=state.last_seen,
        share_bps=shares_now(user=user, ids=[gpu.pk], now=now).get(gpu.pk, 0),
    )


def _hour_telemetry(*, gpu: Gpu, window: Interval) -> list[tuple[datetime, int, Decimal, Any]]:
    """Per hour of the window with telemetry: (hour, windows, energy kWh, maximum °C) from
    the hourly rollups — the power and temperature charts (telemetry, not accounting)."""
    return list(
        HourlyRollup.objects.filter(gpu_id=gpu.pk, hour__gte=window.start, hour__lt=window.end)
        .order_by("hour")
        .values_list("hour", "windows", "energy_kwh", "temp_max_c")
    )


def _metrics(
    row: tuple[datetime, int, Decimal, Any], hour: datetime, busy_s: Decimal, up_s: int
) -> HourMetrics:
    """An hour's utilization as accounting counts it (busy ÷ up seconds, the user's held
    seconds only); its mean power from the energy counter over the minutes reported."""
    _, windows, energy_kwh, temp_max_c = row
    covered_h = Decimal(windows * 60) / 3600
    return HourMetrics(
        hour=hour,
        utilization=busy_s * 100 / up_s if up_s else None,
        power_w=energy_kwh * 1000 / covered_h if windows else None,
        temp_max_c=temp_max_c,
    )


def _days(
    hours: list[HourState], metrics: list[HourMetrics], busy: dict[datetime, Decimal]
) -> list[DaySummary]:
    by_day: dict[datetime, list[HourState]] = {}
    for hour in hours:
        by_day.setdefault(hour.hour.replace(hour=0), []).append(hour)
    metrics_by_day: dict[datetime, list[HourMetrics]] = {}
    for m in metrics:
        metrics_by_day.setdefault(m.hour.replace(hour=0), []).append(m)
    out = []
    for day, day_hours in by_day.items():
        ms = metrics_by_day.get(day, [])
        powers = [m.power_w for m in ms if m.power_w is not None]
        temps = [m.temp_max_c for m in ms if m.temp_max_c is not None]
        up = sum(h.up for h in day_hours)
        day_busy = sum((busy.get(h.hour, Decimal(0)) for h in day_hours), Decimal(0))
        out.append(
            DaySummary(
                day=day,
                up_s=up,
                down_s=sum(h.down for h in day_hours),
                maintenance_s=sum(h.maintenance for h in day_hours),
                no_data_s=sum(h.no_data for h in day_hours),
                # Time-weighted over the day's up seconds, as accounting rule 3 has it.
                utilization=day_busy * 100 / up if up else None,
                power_w=sum(powers, Decimal(0)) / len(powers) if powers else None,
                temp_max_c=max(temps) if temps else None,
            )
        )
    return out


def ownership_history(*, user: User, gpu: Gpu) -> list[dict[str, Any]]:
    """The GPU's ownership rows; other owners are not named (they are other customers)."""
    mine = set(holdings_for_user(user=user).filter(gpu=gpu).values_list("pk", flat=True))
    rows = []
    for row in (
        Ownership.objects.filter(gpu=gpu).select_related("owner").order_by("valid_from", "pk")
    ):
        rows.append(
            {
                "owner": row.owner.legal_name if row.pk in mine else "Another owner",
                "yours": row.pk in mine,
                "share_bps": row.share_bps,
                "valid_from": row.valid_from,
                "valid_to": row.valid_to,
            }
        )
    return rows


def gpu_placements(*, gpu: Gpu) -> list[Placement]:
    """Where the GPU has been, oldest first (placements name no other customer)."""
    return list(
        Placement.objects.filter(gpu=gpu)
        .select_related("node__cluster__site")
        .order_by("valid_from")
    )

"""Reads about the fleet. Times are aware UTC instants; intervals are half-open ``[start, end)``
and exact to the second, so billing can slice revenue and costs without rounding time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import (
    CharField,
    Count,
    DecimalField,
    Exists,
    ExpressionWrapper,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    StringAgg,
    Subquery,
    Value,
)
from django.db.models.functions import Cast, Concat

from accounts.models import AuditEntry, Owner
from fleet.models import (
    Cluster,
    Gpu,
    Incident,
    IncidentDraft,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Node,
    Ownership,
    Placement,
    Site,
)
from fleet.models.ownership import FULL_SHARE_BPS


@dataclass(frozen=True)
class Interval:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())


@dataclass(frozen=True)
class Holding:
    owner_id: Any
    share_bps: int
    ownership_id: int


@dataclass(frozen=True)
class OwnershipSlice:
    """Over ``[start, end)`` the GPU is held exactly as ``holdings`` say; the rest is the
    operator's."""

    start: datetime
    end: datetime
    holdings: tuple[Holding, ...]

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    @property
    def owned_bps(self) -> int:
        return sum(h.share_bps for h in self.holdings)

    @property
    def operator_bps(self) -> int:
        return FULL_SHARE_BPS - self.owned_bps

    def share_of(self, owner_id: Any) -> int:
        return sum(h.share_bps for h in self.holdings if h.owner_id == owner_id)


def _period(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise ValidationError({name: "Give an aware (UTC) instant."})
    if end <= start:
        raise ValidationError({"end": "A period ends after it starts."})
    return start.astimezone(UTC), end.astimezone(UTC)


def _live_at(at: datetime, prefix: str = "") -> Q:
    """Rows whose ``[valid_from, valid_to)`` contains ``at``."""
    return Q(**{f"{prefix}valid_from__lte": at}) & (
        Q(**{f"{prefix}valid_to__isnull": True}) | Q(**{f"{prefix}valid_to__gt": at})
    )


def ownership_at(*, gpu: Gpu, at: datetime) -> tuple[Holding, ...]:
    """Who holds what share of ``gpu`` at instant ``at`` (ordered by owner id)."""
    rows = Ownership.objects.filter(_live_at(at), gpu=gpu).order_by("owner_id")
    return tuple(Holding(r.owner_id, r.share_bps, r.pk) for r in rows)


def ownership_slices(*, gpu: Gpu, start: datetime, end: datetime) -> list[OwnershipSlice]:
    """``[start, end)`` cut where the GPU's holdings change; consecutive slices cover it all.

    A slice with no holdings is wholly the operator's. Boundaries are the exact instants of
    sales and transfers, so a transfer mid-period splits the period at that second.
    """
    start, end = _period(start, end)
    rows = list(
        Ownership.objects.filter(gpu=gpu, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .order_by("valid_from", "owner_id")
    )
    cuts = {start, end}
    for row in rows:
        cuts.update(t for t in (row.valid_from, row.valid_to) if t is not None and start < t < end)
    ordered = sorted(cuts)
    slices: list[OwnershipSlice] = []
    for a, b in itertools.pairwise(ordered):
        holdings = tuple(
            sorted(
                (
                    Holding(r.owner_id, r.share_bps, r.pk)
                    for r in rows
                    if r.valid_from <= a and (r.valid_to is None or r.valid_to > a)
                ),
                key=lambda h: str(h.owner_id),
            )
        )
        if slices and slices[-1].holdings == holdings:
            slices[-1] = OwnershipSlice(slices[-1].start, b, holdings)
        else:
            slices.append(OwnershipSlice(a, b, holdings))
    return slices


def lifecycle_intervals(*, gpu: Gpu, start: datetime, end: datetime) -> list[tuple[str, Interval]]:
    """The GPU's lifecycle states over ``[start, end)``, clipped; before the first transition
    nothing is returned (the GPU was not there)."""
    start, end = _period(start, end)
    transitions = list(LifecycleTransition.objects.filter(gpu=gpu).order_by("at"))
    result: list[tuple[str, Interval]] = []
    for current, following in zip(transitions, [*transitions[1:], None], strict=True):
        begins = max(current.at, start)
        ends = min(following.at if following is not None else end, end)
        if begins < ends:
            result.append((current.state, Interval(begins, ends)))
    return result


def in_service_intervals(*, gpu: Gpu, start: datetime, end: datetime) -> list[Interval]:
    """Where the GPU was in service within ``[start, end)`` — what accounting counts."""
    merged: list[Interval] = []
    for state, interval in lifecycle_intervals(gpu=gpu, start=start, end=end):
        if state != LifecycleState.IN_SERVICE:
            continue
        if merged and merged[-1].end == interval.start:
            merged[-1] = Interval(merged[-1].start, interval.end)
        else:
            merged.append(interval)
    return merged


def gpus_affected(
    *,
    at: datetime,
    site: Site | None = None,
    cluster: Cluster | None = None,
    node: Node | None = None,
    gpu: Gpu | None = None,
) -> QuerySet[Gpu]:
    """The GPUs a scope (exactly one of site, cluster, node, GPU) covers at instant ``at``.

    A GPU scope is that GPU wherever it is; the others are the GPUs placed there at ``at``.
    """
    given = [s for s in (site, cluster, node, gpu) if s is not None]
    if len(given) != 1:
        raise ValidationError("Give exactly one of site, cluster, node or GPU.")
    if gpu is not None:
        return Gpu.objects.filter(pk=gpu.pk)
    where: dict[str, Any]
    if node is not None:
        where = {"node": node}
    elif cluster is not None:
        where = {"node__cluster": cluster}
    else:
        where = {"node__cluster__site": site}
    placed = Placement.objects.filter(_live_at(at), gpu=OuterRef("pk"), **where)
    return Gpu.objects.filter(Exists(placed))


def scope_gpus(*, scoped: MaintenanceWindow | Incident, at: datetime) -> QuerySet[Gpu]:
    """The GPUs a maintenance window or incident affects at ``at``."""
    return gpus_affected(
        at=at, site=scoped.site, cluster=scoped.cluster, node=scoped.node, gpu=scoped.gpu
    )


def owners_affected(*, scoped: MaintenanceWindow | Incident, at: datetime) -> QuerySet[Owner]:
    """The owners holding a share of a GPU the window or incident affects at ``at``."""
    held = Ownership.objects.filter(
        _live_at(at), owner=OuterRef("pk"), gpu__in=scope_gpus(scoped=scoped, at=at)
    )
    return Owner.objects.filter(Exists(held))


# The one rule of who an incident or maintenance window concerns (the portal, the partner API,
# notifications and webhooks all ask it): it *touched a holding* when, for a GPU scope, it is
# that GPU, or for a node, cluster or site scope a placement there overlapped both the event
# and the holding. Open ends are infinity. ``e`` is the event, ``o`` the ownership row.
_TOUCH_SQL = """
SELECT {select} FROM {table} e
JOIN fleet_ownership o
  ON o.valid_from < COALESCE(e.{end}, 'infinity')
 AND COALESCE(o.valid_to, 'infinity') > e.{start}
{join}
WHERE {where} AND (e.gpu_id = o.gpu_id OR EXISTS (
  SELECT 1 FROM fleet_placement p
  JOIN fleet_node n ON n.id = p.node_id
  JOIN fleet_cluster c ON c.id = n.cluster_id
  WHERE p.gpu_id = o.gpu_id
    AND (p.node_id = e.node_id OR n.cluster_id = e.cluster_id OR c.site_id = e.site_id)
    AND p.valid_from < LEAST(COALESCE(e.{end}, 'infinity'), COALESCE(o.valid_to, 'infinity'))
    AND COALESCE(p.valid_to, 'infinity') > GREATEST(e.{start}, o.valid_from)
))
"""
_TOUCH_TABLES = {
    Incident: ("fleet_incident", "started_at", "ended_at"),
    MaintenanceWindow: ("fleet_maintenancewindow", "starts_at", "ends_at"),
}


def touch_sql(
    model: type[Incident | MaintenanceWindow], *, select: str, where: str, join: str = ""
) -> str:
    """The SQL of the touch rule above for incidents or maintenance windows (``model``):
    ``select`` and ``where`` over ``e`` (the event) and ``o`` (the holding it touched), with
    ``join`` for more tables. Fixed text from the callers; values go as parameters."""
    table, start, end = _TOUCH_TABLES[model]
    return _TOUCH_SQL.format(
        select=select, table=table, start=start, end=end, join=join, where=where
    )


def incident_owner_ids(*, incident: Incident) -> list[Any]:
    """The owner accounts an incident concerns: those whose holding it touched."""
    sql = touch_sql(Incident, select="DISTINCT o.owner_id", where="e.id = %s")
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} ORDER BY o.owner_id", [incident.pk])
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True)
class GpuHistory:
    placements: list[Placement]
    ownerships: list[Ownership]
    lifecycle: list[LifecycleTransition]
    audit: list[AuditEntry]


def gpu_history(*, gpu: Gpu, audit_limit: int = 200) -> GpuHistory:
    """Everything that happened to a GPU, oldest first (audit: newest first)."""
    return GpuHistory(
        placements=list(
            Placement.objects.filter(gpu=gpu)
            .select_related("node__cluster__site", "created_by")
            .order_by("valid_from")
        ),
        ownerships=list(
            Ownership.objects.filter(gpu=gpu)
            .select_related("owner", "created_by")
            .order_by("valid_from", "owner__legal_name")
        ),
        lifecycle=list(
            LifecycleTransition.objects.filter(gpu=gpu).select_related("recorded_by").order_by("at")
        ),
        audit=list(
            AuditEntry.objects.filter(object_type=gpu._meta.label_lower, object_id=str(gpu.pk))
            .select_related("actor")
            .order_by("-at", "-id")[:audit_limit]
        ),
    )


def _share_text(percent: bool) -> Any:
    """A holding's share in SQL: basis points (``2500``, as the CSV export writes them) or as
    operators read it (``25 %``, ``33.33 %``: what ``share_percent`` writes)."""
    if not percent:
        return Cast("share_bps", CharField())
    fixed = Func(
        ExpressionWrapper(
            Cast("share_bps", DecimalField(max_digits=7, decimal_places=2)) / Value(Decimal(100)),
            output_field=DecimalField(),
        ),
        Value("FM99990.00"),
        function="to_char",
        output_field=CharField(),
    )
    trimmed = Func(Func(fixed, Value("0"), function="rtrim"), Value("."), function="rtrim")
    return Concat(trimmed, Value(" %"), output_field=CharField())


def gpus_with_whereabouts(*, at: datetime, percent: bool = False) -> QuerySet[Gpu]:
    """GPUs with where they are and who holds them at ``at``, in one query.

    Annotates ``site_code``, ``cluster_code``, ``hostname``, ``slot`` (null when not placed)
    and ``owners`` ("Legal name: bps; …", or with ``percent`` "Legal name: 25 %; …"; null
    when wholly the operator's).
    """
    here = Placement.objects.filter(_live_at(at), gpu=OuterRef("pk"))
    holders = (
        Ownership.objects.filter(_live_at(at), gpu=OuterRef("pk"))
        .order_by()
        .values("gpu")
        .annotate(
            names=StringAgg(
                Concat(
                    "owner__legal_name",
                    Value(": "),
                    _share_text(percent),
                    output_field=CharField(),
                ),
                delimiter=Value("; "),
                order_by="owner__legal_name",
            )
        )
        .values("names")
    )
    return Gpu.objects.select_related("model").annotate(
        site_code=Subquery(here.values("node__cluster__site__code")[:1]),
        cluster_code=Subquery(here.values("node__cluster__code")[:1]),
        hostname=Subquery(here.values("node__hostname")[:1]),
        slot=Subquery(here.values("slot")[:1], output_field=IntegerField()),
        owners=Subquery(holders, output_field=CharField()),
    )


EXPORT_HEADER = [
    "serial",
    "nvml_uuid",
    "model",
    "lifecycle_state",
    "site",
    "cluster",
    "node",
    "slot",
    "owners",
]


def inventory_export_rows(*, at: datetime, chunk_size: int = 2000) -> Iterator[list[str]]:
    """The inventory at ``at`` as CSV rows (header first), streamed in chunks."""
    yield EXPORT_HEADER
    for gpu in gpus_with_whereabouts(at=at).order_by("serial").iterator(chunk_size=chunk_size):
        yield [
            gpu.serial,
            gpu.nvml_uuid,
            gpu.model.name,
            gpu.lifecycle_state,
            gpu.site_code or "",  # type: ignore[attr-defined]
            gpu.cluster_code or "",  # type: ignore[attr-defined]
            gpu.hostname or "",  # type: ignore[attr-defined]
            "" if gpu.slot is None else str(gpu.slot),  # type: ignore[attr-defined]
            gpu.owners or "",  # type: ignore[attr-defined]
        ]


def gpus_by_lifecycle() -> list[tuple[str, str, int]]:
    """GPUs per lifecycle state, every state listed in lifecycle order (state, label, count):
    one GROUP BY on the state's index."""
    counts = dict(Gpu.objects.order_by().values_list("lifecycle_state").annotate(n=Count("pk")))
    return [
        (value, str(label), int(counts.get(value, 0))) for value, label in LifecycleState.choices
    ]


@dataclass(frozen=True)
class OpenIncidents:
    """What the console's front page shows of incidents."""

    incidents: list[Incident]  # the newest open ones, at most ``limit``
    incident_count: int
    drafts: list[IncidentDraft]  # drafts awaiting confirmation, newest first
    draft_count: int


def incidents_open(*, limit: int = 10) -> OpenIncidents:
    """Open incidents, and the draft incidents the telemetry opened that no operator has
    confirmed or dismissed yet.

    Drafts live apart from incidents (``IncidentDraft``): every read of incidents, billing's
    included, sees confirmed incidents only.
    """
    incidents = Incident.objects.filter(ended_at__isnull=True)
    drafts = IncidentDraft.objects.filter(status=IncidentDraft.Status.OPEN)
    return OpenIncidents(
        incidents=list(
            incidents.select_related("site", "cluster", "node", "gpu").order_by(
                "-started_at", "-pk"
            )[:limit]
        ),
        incident_count=incidents.count(),
        drafts=list(drafts.select_related("gpu").order_by("-started_at", "-pk")[:limit]),
        draft_count=drafts.count(),
    )


def gpu_ids_in_service() -> list[Any]:
    """The GPUs in service now (their lifecycle state), for reads about the running fleet."""
    return list(
        Gpu.objects.filter(lifecycle_state=LifecycleState.IN_SERVICE)
        .order_by()
        .values_list("pk", flat=True)
    )

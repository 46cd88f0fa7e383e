"""Who may see what through the partner API: the one place that resolves objects for a key.

A key reads owner accounts, per scope:

* a **partner key** — owners with a live grant to its partner whose scopes include the
  scope, if the key's own scopes do too;
* a **personal key** — its owner account, if the key's scopes include the scope and the user
  who made it is still an active member of that account.

Everything served is filtered through ``owner_ids_for_caller`` on every request, so a revoked
grant, a revoked key or a removed member stops working at the next request. A GPU is visible
if one of those accounts holds or held a share of it; an incident or maintenance window if it
touched such a GPU while the account held it (the portal's rule). Anything else is 404, never
403, so ids of other owners' things reveal nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from django.db.models import (
    Exists,
    F,
    FilteredRelation,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import RawSQL
from django.http import Http404
from django.utils import timezone

from accounts.models import ApiKey, Membership, Owner, PartnerGrant
from billing.models import Payout, Statement
from fleet.models import Gpu, Incident, MaintenanceWindow, Ownership
from telemetry.models import GpuStateTransition


@dataclass
class Caller:
    """The authenticated API key of one request (``request.user``); owner ids are cached per
    scope for the request only."""

    key: ApiKey
    _owner_ids: dict[str, list[uuid.UUID]] = field(default_factory=dict, repr=False)

    is_authenticated: ClassVar[bool] = True
    is_anonymous: ClassVar[bool] = False

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.key.scopes)


def owner_ids_for_caller(*, caller: Caller, scope: str) -> list[uuid.UUID]:
    """The owner accounts whose data ``caller`` may read within ``scope``, right now."""
    if scope in caller._owner_ids:
        return caller._owner_ids[scope]
    key = caller.key
    ids: list[uuid.UUID] = []
    if scope in key.scopes:
        if key.partner_id is not None:
            grants = PartnerGrant.objects.filter(
                partner_id=key.partner_id, revoked_at__isnull=True, scopes__contains=[scope]
            )
            ids = sorted(set(grants.values_list("owner_id", flat=True)))
        elif key.owner_id is not None:
            members = Membership.objects.filter(
                owner_id=key.owner_id, user_id=key.created_by_id, user__is_active=True
            )
            ids = sorted(set(members.values_list("owner_id", flat=True)))
    caller._owner_ids[scope] = ids
    return ids


def owners_for_caller(*, caller: Caller) -> QuerySet[Owner]:
    """Owner accounts the caller may read anything of (any scope)."""
    ids = {i for scope in caller.scopes for i in owner_ids_for_caller(caller=caller, scope=scope)}
    return Owner.objects.filter(pk__in=ids)


def owner_for_caller(*, caller: Caller, owner_id: Any) -> Owner:
    owner = owners_for_caller(caller=caller).filter(pk=owner_id).first()
    if owner is None:
        raise Http404("No such owner.")
    return owner


def _live_at(at: datetime) -> Q:
    return Q(valid_from__lte=at) & (Q(valid_to__isnull=True) | Q(valid_to__gt=at))


def gpus_for_caller(
    *, caller: Caller, scope: str, held_at: datetime | None = None, now: datetime | None = None
) -> QuerySet[Gpu]:
    """GPUs the caller's accounts hold or held (with ``held_at``: held then), annotated with
    where each is now and its telemetry state now; ``visible_holdings`` lists the caller's
    accounts' shares now (other owners never appear)."""
    ids = owner_ids_for_caller(caller=caller, scope=scope)
    now = now or timezone.now()
    rows = Ownership.objects.filter(owner_id__in=ids, gpu=OuterRef("pk"))
    if held_at is not None:
        rows = rows.filter(_live_at(held_at))
    # Where it is now: a join on the placement live now, not four correlated subqueries.
    # The database refuses overlapping placements of a GPU (fleet migration 0002), so the
    # join matches at most one row and cannot repeat a GPU.
    live = Q(placements__valid_from__lte=now) & (
        Q(placements__valid_to__isnull=True) | Q(placements__valid_to__gt=now)
    )
    state = GpuStateTransition.objects.filter(gpu=OuterRef("pk"), at__lte=now).order_by("-at")
    return (
        Gpu.objects.filter(Exists(rows))
        .select_related("model")
        .annotate(
            here=FilteredRelation("placements", condition=live),
            site_code=F("here__node__cluster__site__code"),
            cluster_code=F("here__node__cluster__code"),
            hostname=F("here__node__hostname"),
            slot=F("here__slot"),
            telemetry_state=Subquery(state.values("state")[:1]),
            telemetry_state_since=Subquery(state.values("at")[:1]),
        )
        .prefetch_related(
            Prefetch(
                "ownerships",
                queryset=Ownership.objects.filter(_live_at(now), owner_id__in=ids).order_by(
                    "owner_id"
                ),
                to_attr="visible_holdings",
            )
        )
    )


def holdings_for_caller(
    *, caller: Caller, scope: str, gpu_ids: Sequence[uuid.UUID], now: datetime
) -> dict[uuid.UUID, list[tuple[Any, ...]]]:
    """``visible_holdings`` of ``gpus_for_caller`` for many GPUs in one query, as rows of
    (owner_id, share_bps, valid_from, valid_to) per GPU, in the same order."""
    ids = owner_ids_for_caller(caller=caller, scope=scope)
    rows = (
        Ownership.objects.filter(_live_at(now), owner_id__in=ids, gpu_id__in=gpu_ids)
        .order_by("owner_id")
        .values_list("gpu_id", "owner_id", "share_bps", "valid_from", "valid_to")
    )
    out: dict[uuid.UUID, list[tuple[Any, ...]]] = {}
    for gpu_id, *row in rows:
        out.setdefault(gpu_id, []).append(tuple(row))
    return out


def gpu_for_caller(*, caller: Caller, scope: str, gpu_id: Any, bare: bool = False) -> Gpu:
    """The GPU if the caller's accounts hold or held it, else 404. ``bare``: the row alone,
    without where it is now, its state and holdings (one query, for views that need only
    the GPU itself)."""
    if bare:
        ids = owner_ids_for_caller(caller=caller, scope=scope)
        held = Ownership.objects.filter(owner_id__in=ids, gpu=OuterRef("pk"))
        gpu = Gpu.objects.filter(Exists(held), pk=gpu_id).first()
    else:
        gpu = gpus_for_caller(caller=caller, scope=scope).filter(pk=gpu_id).first()
    if gpu is None:
        raise Http404("No such GPU.")
    return gpu


def ownership_for_caller(*, caller: Caller, gpu: Gpu) -> QuerySet[Ownership]:
    """The GPU's ownership rows of the caller's accounts, past and present."""
    ids = owner_ids_for_caller(caller=caller, scope="fleet:read")
    return Ownership.objects.filter(gpu=gpu, owner_id__in=ids).order_by("valid_from", "owner_id")


# An event touched a holding when, for a GPU scope, it is the same GPU, or for a node,
# cluster or site scope a placement there overlapped both the event and the holding.
_TOUCH_SQL = """
SELECT e.id FROM {table} e
JOIN fleet_ownership o
  ON o.valid_from < COALESCE(e.{end}, 'infinity')
 AND COALESCE(o.valid_to, 'infinity') > e.{start}
WHERE o.owner_id = ANY(%s::uuid[]) {gpu} AND (e.gpu_id = o.gpu_id OR EXISTS (
  SELECT 1 FROM fleet_placement p
  JOIN fleet_node n ON n.id = p.node_id
  JOIN fleet_cluster c ON c.id = n.cluster_id
  WHERE p.gpu_id = o.gpu_id
    AND (p.node_id = e.node_id OR n.cluster_id = e.cluster_id OR c.site_id = e.site_id)
    AND p.valid_from < LEAST(COALESCE(e.{end}, 'infinity'), COALESCE(o.valid_to, 'infinity'))
    AND COALESCE(p.valid_to, 'infinity') > GREATEST(e.{start}, o.valid_from)
))
"""
_TABLES = {
    Incident: ("fleet_incident", "started_at", "ended_at"),
    MaintenanceWindow: ("fleet_maintenancewindow", "starts_at", "ends_at"),
}


def _touched(
    model: type[Incident | MaintenanceWindow], *, caller: Caller, gpu: Gpu | None
) -> RawSQL:
    table, start, end = _TABLES[model]
    params: list[Any] = [owner_ids_for_caller(caller=caller, scope="fleet:read")]
    if gpu is not None:
        params.append(gpu.pk)
    sql = _TOUCH_SQL.format(
        table=table, start=start, end=end, gpu="AND o.gpu_id = %s" if gpu is not None else ""
    )
    return RawSQL(sql, params)  # noqa: S611 - fixed SQL; values only as parameters


def incidents_for_caller(*, caller: Caller, gpu: Gpu | None = None) -> QuerySet[Incident]:
    return Incident.objects.filter(pk__in=_touched(Incident, caller=caller, gpu=gpu))


def maintenance_for_caller(
    *, caller: Caller, gpu: Gpu | None = None
) -> QuerySet[MaintenanceWindow]:
    """Announced windows only: one not yet announced is not shown to anyone."""
    return MaintenanceWindow.objects.filter(
        pk__in=_touched(MaintenanceWindow, caller=caller, gpu=gpu),
        announced_at__lte=timezone.now(),
    )


def statements_for_caller(*, caller: Caller) -> QuerySet[Statement]:
    """Published statements of the caller's accounts: drafts change and are not served."""
    ids = owner_ids_for_caller(caller=caller, scope="statements:read")
    return Statement.objects.filter(owner_id__in=ids, status=Statement.Status.PUBLISHED)


def statement_for_caller(*, caller: Caller, statement_id: Any) -> Statement:
    statement = (
        statements_for_caller(caller=caller)
        .select_related("period")
        .filter(pk=statement_id)
        .first()
    )
    if statement is None:
        raise Http404("No such statement.")
    return statement


def payouts_for_caller(*, caller: Caller) -> QuerySet[Payout]:
    ids = owner_ids_for_caller(caller=caller, scope="statements:read")
    return Payout.objects.filter(owner_id__in=ids)

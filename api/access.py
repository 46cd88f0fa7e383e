"""Who may see what through the partner API: the one place that resolves objects for a key.

A key reads owner accounts, per scope:

* a **partner key** — owners with a live grant to its partner whose scopes include the
  scope, if the key's own scopes do too and the user who made it still belongs to the
  partner (or is an operator: the users who may make a partner's keys);
* a **personal key** — its owner account, if the key's scopes include the scope and the user
  who made it is still an active member of that account.

Earnings (``statements:read``) need one more thing of a personal key: its maker has
acknowledged the current risk disclosure (``earnings_refusal``), as the portal asks of an
owner before any earnings page. A partner key is not asked: see docs/api.md, Keys.

Everything served is filtered through ``owner_ids_for_caller`` on every request, so a revoked
grant, a revoked key or a removed member stops working at the next request. What the people
of those accounts may see is ``access.visibility``'s rule, the one the portal asks too; the
fast paths below (plain SQL for the GPU list and holdings) are held to it by
tests/api/test_gpu_rows.py and tests/test_access_matrix.py. Anything else is 404, never 403,
so ids of other owners' things reveal nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from django.db import connection
from django.db.models import (
    CharField,
    DateTimeField,
    F,
    Field,
    FilteredRelation,
    Prefetch,
    Q,
    QuerySet,
)
from django.db.models.expressions import RawSQL
from django.http import Http404
from django.utils import timezone

from access import visibility
from accounts.models import (
    ApiKey,
    Disclosure,
    DisclosureAcknowledgement,
    Membership,
    Owner,
    PartnerGrant,
    PartnerMember,
    User,
)
from accounts.selectors import disclosure_acknowledged, disclosure_current
from billing.models import Payout, Statement
from fleet.models import (
    Cluster,
    Gpu,
    GpuModel,
    Incident,
    MaintenanceWindow,
    Node,
    Ownership,
    Placement,
    Site,
)
from telemetry.selectors import state_fresh_for, state_now_join


@dataclass
class Caller:
    """The authenticated API key of one request (``request.user``); owner ids are cached per
    scope for the request only."""

    key: ApiKey
    _owner_ids: dict[str, list[uuid.UUID]] = field(default_factory=dict, repr=False)
    # The current risk disclosure's version (None: none published) and whether the key's
    # maker acknowledged it, as read with the key (``key_for_request``).
    disclosure_version: str | None = None
    disclosure_acknowledged: bool = False

    is_authenticated: ClassVar[bool] = True
    is_anonymous: ClassVar[bool] = False

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.key.scopes)


def owner_ids_for_caller(*, caller: Caller, scope: str) -> list[uuid.UUID]:
    """The owner accounts whose data ``caller`` may read within ``scope``, right now."""
    if scope in caller._owner_ids:
        return caller._owner_ids[scope]
    ids = owner_ids_by_orm(key=caller.key, scope=scope)
    caller._owner_ids[scope] = ids
    return ids


def owner_ids_by_orm(*, key: ApiKey, scope: str) -> list[uuid.UUID]:
    """``owner_ids_for_caller`` by one ORM query per scope: the reference for ``key_for_request``
    (tests/api/test_key_lookup.py compares them)."""
    ids: list[uuid.UUID] = []
    if scope in key.scopes:
        if key.partner_id is not None and maker_belongs_by_orm(key=key):
            grants = PartnerGrant.objects.filter(
                partner_id=key.partner_id, revoked_at__isnull=True, scopes__contains=[scope]
            )
            ids = sorted(set(grants.values_list("owner_id", flat=True)))
        elif key.owner_id is not None:
            members = Membership.objects.filter(
                owner_id=key.owner_id, user_id=key.created_by_id, user__is_active=True
            )
            ids = sorted(set(members.values_list("owner_id", flat=True)))
    return ids


def maker_belongs_by_orm(*, key: ApiKey) -> bool:
    """Whether a partner key's maker still belongs to its partner: an active user who is one
    of its members or an operator (who may make a partner's keys). Always true of a personal
    key (its rule is in ``owner_ids_by_orm``). The reference for ``KeyLookup.maker_belongs``."""
    if key.partner_id is None:
        return True
    user = key.created_by
    return user.is_active and (
        user.is_staff
        or PartnerMember.objects.filter(partner_id=key.partner_id, user_id=user.pk).exists()
    )


def disclosure_by_orm(*, key: ApiKey) -> tuple[str | None, bool]:
    """For a personal key, the current disclosure's version and whether the key's maker
    acknowledged it (a partner key is not asked: None, False): the reference for
    ``KeyLookup.disclosure_version`` and ``disclosure_acknowledged``."""
    current = disclosure_current() if key.owner_id is not None else None
    if current is None:
        return None, False
    return current.version, disclosure_acknowledged(user=key.created_by, disclosure=current)


def earnings_refusal(*, caller: Caller) -> str | None:
    """Why ``caller`` may not read earnings now, or None if it may. A personal key reads them
    only once its maker has acknowledged the current disclosure version (DESIGN, Disclosures:
    the portal's ``earnings_view`` rule). A partner key is not an owner and is not asked."""
    if caller.key.owner_id is None:
        return None
    if caller.disclosure_version is None:
        return "No risk disclosure is published yet, so no earnings are shown to personal keys."
    if not caller.disclosure_acknowledged:
        return (
            f"Acknowledge the risk disclosure, version {caller.disclosure_version}, in the "
            "portal (/disclosure/) before this personal key can read earnings."
        )
    return None


# The key of a request, the user who made it, and what the key may reach (a partner key: the
# partner's live grants with their scopes, and whether its maker still belongs to the
# partner; a personal key: the maker's membership of its owner), with the current disclosure
# version and whether the maker acknowledged it, in one query, for ``key_for_request``.
# Plain SQL: the ORM would spend more CPU compiling these than the database spends answering
# them, on every request.
_KEY_FIELDS = ApiKey._meta.concrete_fields
_USER_FIELDS = User._meta.concrete_fields
_KEY_SQL = f"""
SELECT {", ".join(f'k."{f.column}"' for f in _KEY_FIELDS)},
       {", ".join(f'u."{f.column}"' for f in _USER_FIELDS)},
       (SELECT json_agg(json_build_array(g.owner_id, g.scopes))
          FROM {PartnerGrant._meta.db_table} g
         WHERE g.partner_id = k.partner_id AND g.revoked_at IS NULL) AS grants,
       (SELECT json_agg(m.owner_id)
          FROM {Membership._meta.db_table} m
         WHERE m.owner_id = k.owner_id AND m.user_id = k.created_by_id) AS memberships,
       (k.partner_id IS NULL OR (u.is_active AND (u.is_staff OR EXISTS (
          SELECT FROM {PartnerMember._meta.db_table} pm
           WHERE pm.partner_id = k.partner_id AND pm.user_id = k.created_by_id)))) AS belongs,
       (SELECT json_build_array(d.version, EXISTS (
                 SELECT FROM {DisclosureAcknowledgement._meta.db_table} a
                  WHERE a.disclosure_id = d.id AND a.user_id = k.created_by_id))
          FROM {Disclosure._meta.db_table} d
         WHERE d.published_at IS NOT NULL AND k.owner_id IS NOT NULL
         ORDER BY d.published_at DESC LIMIT 1) AS disclosure
  FROM {ApiKey._meta.db_table} k
  JOIN {User._meta.db_table} u ON u.id = k.created_by_id
 WHERE k.prefix = %s
"""  # noqa: S608 - names from the models' metadata; the prefix only as a parameter


@dataclass
class KeyLookup:
    """The key with ``prefix`` (its ``created_by`` loaded) and, per scope of the key, the
    owner accounts it may read (``owner_ids_for_caller`` as it is right now); whether its
    maker still belongs to its partner (``maker_belongs_by_orm``); the current disclosure's
    version and whether its maker acknowledged it (``disclosure_by_orm``)."""

    key: ApiKey
    owner_ids: dict[str, list[uuid.UUID]]
    maker_belongs: bool = True
    disclosure_version: str | None = None
    disclosure_acknowledged: bool = False


def key_for_request(*, prefix: str) -> KeyLookup | None:
    """The key with ``prefix`` and what it may read, in one query; None if there is none.
    It is read afresh on every request: a revoked key or grant counts at the next one."""
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    n = len(_KEY_FIELDS)
    key = ApiKey.from_db(connection.alias, [f.attname for f in _KEY_FIELDS], row[:n])
    user = User.from_db(connection.alias, [f.attname for f in _USER_FIELDS], row[n:-4])
    key.created_by = user
    grants, memberships, belongs, disclosure = row[-4] or [], row[-3] or [], row[-2], row[-1]
    owner_ids: dict[str, list[uuid.UUID]] = {}
    for scope in key.scopes:
        if key.partner_id is not None and belongs:
            found = {owner for owner, scopes in grants if scope in scopes}
        elif key.owner_id is not None and user.is_active:
            found = set(memberships)
        else:
            found = set()
        owner_ids[scope] = sorted(uuid.UUID(owner) for owner in found)
    version, acknowledged = disclosure if disclosure is not None else (None, False)
    return KeyLookup(
        key=key,
        owner_ids=owner_ids,
        maker_belongs=belongs,
        disclosure_version=version,
        disclosure_acknowledged=bool(acknowledged),
    )


def owners_for_caller(*, caller: Caller) -> QuerySet[Owner]:
    """Owner accounts the caller may read anything of (any scope)."""
    ids = {i for scope in caller.scopes for i in owner_ids_for_caller(caller=caller, scope=scope)}
    return Owner.objects.filter(pk__in=ids)


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
    visible = visibility.gpus_visible(
        accounts=visibility.accounts_of(owner_ids=ids), held_at=held_at
    )
    # Where it is now: a join on the placement live now, not four correlated subqueries.
    # The database refuses overlapping placements of a GPU (fleet migration 0002), so the
    # join matches at most one row and cannot repeat a GPU.
    live = Q(placements__valid_from__lte=now) & (
        Q(placements__valid_to__isnull=True) | Q(placements__valid_to__gt=now)
    )
    return (
        visible.select_related("model")
        .annotate(
            here=FilteredRelation("placements", condition=live),
            site_code=F("here__node__cluster__site__code"),
            cluster_code=F("here__node__cluster__code"),
            hostname=F("here__node__hostname"),
            slot=F("here__slot"),
            telemetry_state=_state_now("state", now, CharField()),
            telemetry_state_since=_state_now("since", now, DateTimeField()),
            telemetry_last_seen_at=_state_now("last_seen", now, DateTimeField()),
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


def _state_now(column: str, now: datetime, output_field: Field[Any, Any]) -> RawSQL:
    """One column of the GPU's telemetry state now (``telemetry.selectors.state_now_join``:
    never the state of a run whose telemetry ended), for the annotated queryset."""
    join = state_now_join(
        gpu=f'"{Gpu._meta.db_table}"."id"', now="%s", alias="s", fresh_for=state_fresh_for()
    )
    sql = f"(SELECT s.{column} FROM (SELECT 1) AS one {join})"  # noqa: S608 - fixed SQL
    return RawSQL(sql, [now], output_field=output_field)  # noqa: S611 - fixed SQL, values as params


# The GPU list: ``gpus_for_caller``'s rows (the columns ``GPU_ROW_COLUMNS`` names, in order)
# in plain SQL. The annotated queryset cost about 7 ms of CPU per request to build and compile,
# more than the database spends answering it. The page is cut first and the telemetry state
# read for its GPUs only. tests/api/test_gpu_rows.py compares it with the queryset.
GPU_ROW_COLUMNS = (
    "id",
    "serial",
    "nvml_uuid",
    "model__name",
    "model__memory_mib",
    "lifecycle_state",
    "site_code",
    "cluster_code",
    "hostname",
    "slot",
    "created_at",
    "telemetry_state",
    "telemetry_state_since",
    "telemetry_last_seen_at",
)
_GPU_ORDER_COLUMNS = {"serial": ("g.serial", "text"), "created_at": ("g.created_at", "timestamptz")}
_GPU_PAGE_SQL = f"""
SELECT page.*, t.state, t.since, t.last_seen
  FROM (SELECT g.id, g.serial, g.nvml_uuid, m.name, m.memory_mib, g.lifecycle_state,
               s.code, c.code, n.hostname, p.slot, g.created_at
          FROM {Gpu._meta.db_table} g
          JOIN {GpuModel._meta.db_table} m ON m.id = g.model_id
          LEFT JOIN {Placement._meta.db_table} p
                 ON p.gpu_id = g.id AND p.valid_from <= %(now)s
                AND (p.valid_to IS NULL OR p.valid_to > %(now)s)
          LEFT JOIN {Node._meta.db_table} n ON n.id = p.node_id
          LEFT JOIN {Cluster._meta.db_table} c ON c.id = n.cluster_id
          LEFT JOIN {Site._meta.db_table} s ON s.id = c.site_id
         WHERE EXISTS (SELECT FROM {Ownership._meta.db_table} o
                        WHERE o.gpu_id = g.id AND o.owner_id = ANY(%(owners)s::uuid[]){{held}})
               {{where}}
         ORDER BY {{order}}
         LIMIT %(limit)s OFFSET %(offset)s) page (id, serial, nvml_uuid, model__name,
         model__memory_mib, lifecycle_state, site_code, cluster_code, hostname, slot, created_at)
  {{state}}
 ORDER BY {{outer_order}}
"""  # noqa: S608 - table names from the models; values only as parameters
_HELD_BY = f"""EXISTS (SELECT FROM {Ownership._meta.db_table} w
                      WHERE w.gpu_id = g.id AND w.owner_id = %(owner)s{{held}})"""
# A holding live at ``held_at``, on the ownership table as ``{t}``.
_HELD_AT = (
    " AND {t}.valid_from <= %(held_at)s AND ({t}.valid_to IS NULL OR {t}.valid_to > %(held_at)s)"
)


@dataclass(frozen=True)
class GpuRows:
    """GPUs the caller's accounts hold or held, as rows for ``ApiCursorPagination``: what it
    asks of a queryset (``order_by`` on the ordering fields, ``filter`` by its position,
    one slice) and what ``OrderingFilter`` asks (``order_by``), over one SQL query. Ties in
    the ordering fall back to the GPU id in the same direction, so a page boundary inside a
    run of equal ``created_at`` is stable."""

    model: ClassVar[type[Gpu]] = Gpu  # the paginator parses a cursor's position by its field
    params: dict[str, Any]
    held: bool = False  # held at ``params["held_at"]``, not ever
    where: tuple[str, ...] = ()
    ordering: tuple[str, ...] = ("serial",)
    empty: bool = False

    def none(self) -> GpuRows:
        return replace(self, empty=True)

    def order_by(self, *fields: str) -> GpuRows:
        if len(fields) > 1 and fields[-1].lstrip("-") in ("id", "pk"):
            fields = fields[:-1]  # the id tie-break the rows always add
        unknown = [f for f in fields if f.lstrip("-") not in _GPU_ORDER_COLUMNS]
        if unknown or not fields:
            raise ValueError(f"GPU rows order by {sorted(_GPU_ORDER_COLUMNS)}, not {fields}")
        return replace(self, ordering=fields)

    def filter(self, **position: Any) -> GpuRows:
        """The paginator's position: one ``<ordering field>__gt`` or ``__lt``."""
        ((lookup, value),) = position.items()
        name, _, op = lookup.rpartition("__")
        column, kind = _GPU_ORDER_COLUMNS[name]
        comparison = {"gt": ">", "lt": "<"}[op]
        key = f"p{len(self.where)}"
        clause = f"AND {column} {comparison} %({key})s::{kind}"
        # The paginator hands over the position parsed by its field (typed, never text).
        return replace(self, where=(*self.where, clause), params={**self.params, key: value})

    def where_also(self, clause: str, **params: Any) -> GpuRows:
        """Another ``AND`` condition on ``g`` (the GPU), ``m`` (its model) or ``c`` (the
        cluster it is in now), with its values as named parameters."""
        return replace(self, where=(*self.where, f"AND {clause}"), params={**self.params, **params})

    def __getitem__(self, window: slice) -> list[dict[str, Any]]:
        start, stop = window.start or 0, window.stop
        if self.empty or stop <= start:
            return []
        orders = []
        outer = []
        for field_name in (*self.ordering, "-id" if self.ordering[0][0] == "-" else "id"):
            name = field_name.lstrip("-")
            direction = "DESC" if field_name.startswith("-") else "ASC"
            column = "g.id" if name == "id" else _GPU_ORDER_COLUMNS[name][0]
            orders.append(f"{column} {direction}")
            outer.append(f"page.{name} {direction}")
        sql = _GPU_PAGE_SQL.format(
            held=_HELD_AT.format(t="o") if self.held else "",
            where="\n               ".join(self.where),
            order=", ".join(orders),
            outer_order=", ".join(outer),
            state=state_now_join(
                gpu="page.id", now="%(now)s", alias="t", fresh_for=state_fresh_for()
            ),
        )
        params = {**self.params, "limit": stop - start, "offset": start}
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [dict(zip(GPU_ROW_COLUMNS, row, strict=True)) for row in cursor.fetchall()]


def gpu_rows_for_caller(
    *,
    caller: Caller,
    scope: str,
    now: datetime,
    held_at: datetime | None = None,
    owner: uuid.UUID | None = None,
    lifecycle_state: str | None = None,
    cluster: str | None = None,
    model: str | None = None,
) -> GpuRows:
    """``gpus_for_caller`` as ``GpuRows`` (the same GPUs, placement and telemetry state),
    narrowed to GPUs ``owner`` holds or held (held at ``held_at`` if given; only an owner the
    caller may read, else none: filtering by anyone else's id would reveal which of your GPUs
    they share), in ``lifecycle_state``, in ``cluster`` now, of ``model``."""
    ids = owner_ids_for_caller(caller=caller, scope=scope)
    rows = GpuRows(params={"now": now, "owners": _uuid_array(ids)})
    if held_at is not None:
        rows = replace(rows, held=True, params={**rows.params, "held_at": held_at})
    if owner is not None:
        if owner not in ids:
            return rows.none()
        held = _HELD_AT.format(t="w") if rows.held else ""
        rows = rows.where_also(_HELD_BY.format(held=held), owner=owner)
    if lifecycle_state is not None:
        rows = rows.where_also("g.lifecycle_state = %(state)s", state=lifecycle_state)
    if cluster is not None:
        rows = rows.where_also("c.code = %(cluster)s", cluster=cluster)  # where it is now
    if model is not None:
        rows = rows.where_also("m.name = %(model)s", model=model)
    return rows


def _uuid_array(values: Sequence[uuid.UUID]) -> str:
    """``values`` as one ``uuid[]`` literal parameter: psycopg would otherwise adapt each of
    (up to) 100 ids on its own, which costs more CPU than the query."""
    return (
        "{" + ",".join(str(v if isinstance(v, uuid.UUID) else uuid.UUID(v)) for v in values) + "}"
    )


_HOLDINGS_SQL = f"""
SELECT gpu_id, owner_id, share_bps, valid_from, valid_to
  FROM {Ownership._meta.db_table}
 WHERE valid_from <= %(now)s AND (valid_to IS NULL OR valid_to > %(now)s)
   AND owner_id = ANY(%(owners)s::uuid[]) AND gpu_id = ANY(%(gpus)s::uuid[])
 ORDER BY owner_id
"""  # noqa: S608 - the table name from the model; values only as parameters


def holdings_for_caller(
    *, caller: Caller, scope: str, gpu_ids: Sequence[uuid.UUID], now: datetime
) -> dict[uuid.UUID, list[tuple[Any, ...]]]:
    """``visible_holdings`` of ``gpus_for_caller`` for many GPUs in one query, as rows of
    (owner_id, share_bps, valid_from, valid_to) per GPU, in the same order (the same filter
    as its ``Prefetch``; tests/api/test_rendering.py compares the list with the detail)."""
    ids = owner_ids_for_caller(caller=caller, scope=scope)
    params: dict[str, Any] = {"now": now, "owners": _uuid_array(ids), "gpus": _uuid_array(gpu_ids)}
    with connection.cursor() as cursor:
        cursor.execute(_HOLDINGS_SQL, params)
        rows = cursor.fetchall()
    out: dict[uuid.UUID, list[tuple[Any, ...]]] = {}
    for gpu_id, *row in rows:
        out.setdefault(gpu_id, []).append(tuple(row))
    return out


def gpu_for_caller(*, caller: Caller, scope: str, gpu_id: Any, bare: bool = False) -> Gpu:
    """The GPU if the caller's accounts hold or held it, else 404. ``bare``: the row alone,
    without where it is now, its state and holdings (one query, for views that need only
    the GPU itself)."""
    if bare:
        accounts = _accounts(caller, scope)
        gpu = visibility.gpus_visible(accounts=accounts).filter(pk=gpu_id).first()
    else:
        gpu = gpus_for_caller(caller=caller, scope=scope).filter(pk=gpu_id).first()
    if gpu is None:
        raise Http404("No such GPU.")
    return gpu


def ownership_for_caller(*, caller: Caller, gpu: Gpu) -> QuerySet[Ownership]:
    """The GPU's ownership rows of the caller's accounts, past and present."""
    holdings = visibility.holdings_visible(accounts=_accounts(caller, "fleet:read"))
    return holdings.filter(gpu=gpu).order_by("valid_from", "owner_id")


def _accounts(caller: Caller, scope: str) -> visibility.Accounts:
    return visibility.accounts_of(owner_ids=owner_ids_for_caller(caller=caller, scope=scope))


def incidents_for_caller(*, caller: Caller, gpu: Gpu | None = None) -> QuerySet[Incident]:
    return visibility.incidents_visible(accounts=_accounts(caller, "fleet:read"), gpu=gpu)


def maintenance_for_caller(
    *, caller: Caller, gpu: Gpu | None = None
) -> QuerySet[MaintenanceWindow]:
    """Announced windows only: one not yet announced is not shown to anyone."""
    return visibility.maintenance_visible(accounts=_accounts(caller, "fleet:read"), gpu=gpu)


def statements_for_caller(*, caller: Caller) -> QuerySet[Statement]:
    """Published statements of the caller's accounts: drafts change and are not served."""
    return visibility.statements_visible(accounts=_accounts(caller, "statements:read"))


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
    return visibility.payouts_visible(accounts=_accounts(caller, "statements:read"))

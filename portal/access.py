"""Who may see what in the portal: the one place that resolves objects for a user.

A user reads for the owner accounts they are a member of; what the people of an account may
see (GPUs, holdings, incidents, maintenance, statements, payouts) is ``access.visibility``'s
rule, the same the partner API asks. Everything else answers 404, never 403, so ids of other
owners' things leak nothing. Every portal view goes through these functions; operators use
the console.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404

from access import visibility
from accounts.models import ApiKey, Membership, Owner, PartnerGrant, User
from billing.models import Payout, Statement
from fleet.models import Gpu, Incident, MaintenanceWindow, Ownership
from fleet.selectors import touch_sql
from portal.models import PortalNotice


def owner_ids_for_user(*, user: User) -> QuerySet[Membership, Any]:
    """The owner accounts the user is a member of, as a subquery of ids."""
    return Membership.objects.filter(user_id=user.pk).values("owner_id")


def owners_of_user(*, user: User) -> QuerySet[Owner]:
    return Owner.objects.filter(pk__in=owner_ids_for_user(user=user)).order_by("legal_name")


def holdings_for_user(*, user: User) -> QuerySet[Ownership]:
    """Every ownership row of the user's accounts, past and present."""
    return visibility.holdings_visible(accounts=visibility.accounts_of_member(user=user))


def owners_administered(*, user: User) -> QuerySet[Owner]:
    """The owner accounts the user is an admin of: where they may grant partner access."""
    ids = Membership.objects.filter(user_id=user.pk, role=Membership.Role.ADMIN).values("owner_id")
    return Owner.objects.filter(pk__in=ids).order_by("legal_name")


def partner_grants_for_user(*, user: User) -> QuerySet[PartnerGrant]:
    """Every partner grant, live or revoked, on the user's owner accounts."""
    return PartnerGrant.objects.filter(owner_id__in=owner_ids_for_user(user=user))


def partner_grant_for_user(*, user: User, grant_id: int) -> PartnerGrant:
    grant = partner_grants_for_user(user=user).select_related("owner").filter(pk=grant_id).first()
    if grant is None:
        raise Http404("No such partner grant.")
    return grant


def api_keys_for_user(*, user: User) -> QuerySet[ApiKey]:
    """Personal API keys of the user's owner accounts that the user made, and for an admin of
    an account, every key of that account (to revoke a colleague's)."""
    return ApiKey.objects.filter(owner_id__in=owner_ids_for_user(user=user)).filter(
        Q(created_by_id=user.pk) | Q(owner_id__in=owners_administered(user=user).values("pk"))
    )


def api_key_for_user(*, user: User, key_id: Any) -> ApiKey:
    key = api_keys_for_user(user=user).filter(pk=key_id).first()
    if key is None:
        raise Http404("No such API key.")
    return key


def payouts_for_user(*, user: User) -> QuerySet[Payout]:
    return visibility.payouts_visible(accounts=visibility.accounts_of_member(user=user))


def gpus_for_user(*, user: User, held_at: datetime | None = None) -> QuerySet[Gpu]:
    """GPUs the user's accounts hold or held; with ``held_at``, only those held then."""
    accounts = visibility.accounts_of_member(user=user)
    return visibility.gpus_visible(accounts=accounts, held_at=held_at)


def gpu_for_user(*, user: User, gpu_id: Any) -> Gpu:
    """The GPU, if the user's accounts own or owned it at some time; 404 otherwise."""
    gpu = gpus_for_user(user=user).select_related("model").filter(pk=gpu_id).first()
    if gpu is None:
        raise Http404("No such GPU.")
    return gpu


def incidents_for_user(*, user: User, gpu: Gpu | None = None) -> QuerySet[Incident]:
    """Incidents that touched a GPU while the user's accounts held it (``gpu``: that one)."""
    accounts = visibility.accounts_of_member(user=user)
    return visibility.incidents_visible(accounts=accounts, gpu=gpu)


def maintenance_for_user(*, user: User, gpu: Gpu | None = None) -> QuerySet[MaintenanceWindow]:
    """Announced maintenance windows that cover (or will cover) a GPU the user's accounts
    held then; cancelled windows stay listed, marked as such."""
    accounts = visibility.accounts_of_member(user=user)
    return visibility.maintenance_visible(accounts=accounts, gpu=gpu)


def incident_for_user(*, user: User, incident_id: int) -> Incident:
    incident = incidents_for_user(user=user).filter(pk=incident_id).first()
    if incident is None:
        raise Http404("No such incident.")
    return incident


def maintenance_window_for_user(*, user: User, window_id: int) -> MaintenanceWindow:
    window = maintenance_for_user(user=user).filter(pk=window_id).first()
    if window is None:
        raise Http404("No such maintenance window.")
    return window


def members_concerned(*, scoped: Incident | MaintenanceWindow) -> list[tuple[Any, Any]]:
    """(user id, owner id) for each active member of each account that may see ``scoped``
    (the inverse of the rule above), ordered: whom to tell about it, and for which account."""
    sql = touch_sql(
        type(scoped),
        select="DISTINCT m.user_id, o.owner_id",
        join="JOIN accounts_membership m ON m.owner_id = o.owner_id "
        "JOIN accounts_user u ON u.id = m.user_id AND u.is_active",
        where="e.id = %s",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [scoped.pk])
        return sorted(((row[0], row[1]) for row in cursor.fetchall()), key=str)


def users_concerned(*, scoped: Incident | MaintenanceWindow) -> list[Any]:
    """The active users who may see ``scoped``: the ones to tell about it."""
    return sorted({user_id for user_id, _ in members_concerned(scoped=scoped)})


def gpus_touched(*, user: User, scoped: Incident | MaintenanceWindow) -> QuerySet[Gpu]:
    """The user's GPUs that ``scoped`` touched while the user's accounts held them."""
    members, params = visibility.accounts_of_member(user=user).sql("o.owner_id")
    sql = touch_sql(type(scoped), select="o.gpu_id", where=f"{members} AND e.id = %s")
    ids = RawSQL(sql, [*params, scoped.pk])  # noqa: S611 - fixed SQL, parameters only
    return Gpu.objects.filter(pk__in=ids).select_related("model").order_by("serial")


# ---- statements ----------------------------------------------------------------------------


def statements_for_user(*, user: User) -> QuerySet[Statement]:
    """Published statements of the user's accounts. Drafts are not shown: they change while
    the period closes (the API serves only published ones too)."""
    return visibility.statements_visible(accounts=visibility.accounts_of_member(user=user))


def statement_for_user(*, user: User, statement_id: Any) -> Statement:
    """The statement, if it is published and of one of the user's accounts; 404 otherwise."""
    statement = (
        statements_for_user(user=user).select_related("period", "owner").filter(pk=statement_id)
    ).first()
    if statement is None:
        raise Http404("No such statement.")
    return statement


# ---- notices in the portal ------------------------------------------------------------------


def notices_for_user(*, user: User, now: datetime) -> QuerySet[PortalNotice]:
    """The user's own notices, about accounts they are still a member of, shown from their
    ``shown_from`` (a maintenance notice from the window's announcement)."""
    return PortalNotice.objects.filter(
        user_id=user.pk, owner_id__in=owner_ids_for_user(user=user), shown_from__lte=now
    )


def notice_for_user(*, user: User, notice_id: Any, now: datetime) -> PortalNotice:
    notice = notices_for_user(user=user, now=now).filter(pk=notice_id).first()
    if notice is None:
        raise Http404("No such notice.")
    return notice

"""What the people of owner accounts may see: the one rule, for the portal and the partner API.

Each edge first says for which owner accounts an asker reads (``Accounts``): the portal, a
user's memberships (``accounts_of_member``); the partner API, the accounts a key may read
within a scope (``accounts_of``, from ``api/access.py``, which holds the rules of keys,
grants and scopes). Then both ask this module, so the answer is the same on both edges:

* a **GPU** if one of the accounts holds or held a share of it (``held_at``: held it then);
* a **holding** (ownership row) if it is one of the accounts' own: other owners' shares of
  the same GPU never show;
* an **incident** or **maintenance window** if it touched such a GPU while the account held
  it (``fleet.selectors.touch_sql``: the GPU itself, or a placement in the node, cluster or
  site it covers, overlapping both); a maintenance window only once announced;
* a **statement** if it is published and of one of the accounts (drafts change while their
  period closes);
* a **payout** if it is of one of the accounts.

Nothing else: the edges answer 404 for anything outside these, never 403, so ids of other
owners' things tell nothing. tests/test_access_matrix.py holds both edges to this list.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from accounts.models import Membership, User
from billing.models import Payout, Statement
from fleet.models import Gpu, Incident, MaintenanceWindow, Ownership
from fleet.selectors import touch_sql


@dataclass(frozen=True)
class Accounts:
    """The owner accounts one asker reads for: a user's memberships (read when the query
    runs, so a removed member sees nothing at once) or a fixed list of ids."""

    member: Any = None  # a user's primary key
    ids: tuple[uuid.UUID, ...] = ()

    def q(self, field: str = "owner_id") -> Q:
        """``field`` (an owner id) is one of the accounts."""
        if self.member is not None:
            members = Membership.objects.filter(user_id=self.member).values("owner_id")
            return Q(**{f"{field}__in": members})
        return Q(**{f"{field}__in": self.ids})

    def sql(self, column: str) -> tuple[str, list[Any]]:
        """The same as SQL on ``column``, with its parameters."""
        members = "SELECT m.owner_id FROM accounts_membership m WHERE m.user_id = %s"
        if self.member is not None:
            return f"{column} IN ({members})", [self.member]
        return f"{column} = ANY(%s::uuid[])", [list(self.ids)]


def accounts_of_member(*, user: User) -> Accounts:
    """The accounts ``user`` is a member of (the portal's asker)."""
    return Accounts(member=user.pk)


def accounts_of(*, owner_ids: Iterable[uuid.UUID]) -> Accounts:
    """Exactly these accounts (a key's, for one scope: ``api.access.owner_ids_for_caller``)."""
    return Accounts(ids=tuple(owner_ids))


def _held_then(at: datetime) -> Q:
    return Q(valid_from__lte=at) & (Q(valid_to__isnull=True) | Q(valid_to__gt=at))


def holdings_visible(*, accounts: Accounts) -> QuerySet[Ownership]:
    """The accounts' own ownership rows, past and present."""
    return Ownership.objects.filter(accounts.q())


def gpus_visible(*, accounts: Accounts, held_at: datetime | None = None) -> QuerySet[Gpu]:
    """GPUs the accounts hold or held; with ``held_at``, only those they held then."""
    rows = holdings_visible(accounts=accounts).filter(gpu=OuterRef("pk"))
    if held_at is not None:
        rows = rows.filter(_held_then(held_at))
    return Gpu.objects.filter(Exists(rows))


def _touched(
    model: type[Incident | MaintenanceWindow], *, accounts: Accounts, gpu: Gpu | None
) -> RawSQL:
    where, params = accounts.sql("o.owner_id")
    if gpu is not None:
        where += " AND o.gpu_id = %s"
        params = [*params, gpu.pk]
    sql = touch_sql(model, select="e.id", where=where)
    return RawSQL(sql, params)  # noqa: S611 - fixed SQL; values only as parameters


def incidents_visible(*, accounts: Accounts, gpu: Gpu | None = None) -> QuerySet[Incident]:
    """Incidents that touched a GPU while the accounts held it (``gpu``: that GPU)."""
    return Incident.objects.filter(pk__in=_touched(Incident, accounts=accounts, gpu=gpu))


def maintenance_visible(
    *, accounts: Accounts, gpu: Gpu | None = None, now: datetime | None = None
) -> QuerySet[MaintenanceWindow]:
    """Announced maintenance windows that cover (or will cover) a GPU the accounts held then;
    a window not yet announced is shown to no one, a cancelled one stays, marked so."""
    return MaintenanceWindow.objects.filter(
        pk__in=_touched(MaintenanceWindow, accounts=accounts, gpu=gpu),
        announced_at__lte=now or timezone.now(),
    )


def statements_visible(*, accounts: Accounts) -> QuerySet[Statement]:
    """Published statements of the accounts: drafts change while their period closes."""
    return Statement.objects.filter(accounts.q(), status=Statement.Status.PUBLISHED)


def payouts_visible(*, accounts: Accounts) -> QuerySet[Payout]:
    return Payout.objects.filter(accounts.q())

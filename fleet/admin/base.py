"""Shared pieces of the fleet console: a paginator for big tables, audited saves."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import connection, models
from django.http import HttpRequest

from accounts.admin_site import UtcColumns
from fleet.services.inventory import record_save

# Below this many rows an exact COUNT(*) is cheap enough to be worth its precision.
ESTIMATE_ABOVE = 50_000


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts an unfiltered changelist from the planner's estimate, not a full COUNT(*).

    Filtered lists are counted exactly (filters make them small, and an index serves them).
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, models.QuerySet) and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            estimate = int(row[0]) if row else -1
            if estimate > ESTIMATE_ABOVE:
                return estimate
        return super().count


class BigTableAdmin[M: models.Model](UtcColumns[M]):
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    list_per_page = 100


class ReadOnlyAdmin[M: models.Model](BigTableAdmin[M]):
    """History rows: written only by services, never added, edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditedAdmin[M: models.Model](BigTableAdmin[M]):
    """Saves through ``record_save`` (validated, audited); nothing is deleted from here."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: M, form: Any, change: bool) -> None:
        record_save(obj=obj, by=_user(request), reason=f"Edited in the console: {obj}")  # type: ignore[type-var]


def _user(request: HttpRequest) -> Any:
    return request.user if request.user.is_authenticated else None

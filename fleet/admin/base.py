"""Shared pieces of the fleet console: audited saves over the console toolkit's big tables."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.http import HttpRequest

from accounts.admin_toolkit import BigTableAdmin, ReadOnlyAdmin, ServiceWriteAdmin
from fleet.services.inventory import record_save

__all__ = ["AuditedAdmin", "BigTableAdmin", "ReadOnlyAdmin"]


class AuditedAdmin[M: models.Model](ServiceWriteAdmin[M], BigTableAdmin[M]):
    """Saves through ``record_save`` (validated, audited), once, in ``save_model``; a refusal
    shows the page again with it (the console toolkit). Nothing is deleted from here."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def write(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> Any:
        return record_save(obj=obj, by=_user(request), reason=f"Edited in the console: {obj}")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super(ServiceWriteAdmin, self).save_related(request, form, formsets, change)


def _user(request: HttpRequest) -> Any:
    return request.user if request.user.is_authenticated else None

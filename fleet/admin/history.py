"""Placement, ownership and lifecycle rows: read-only lists, written only by the services."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet.admin.base import ReadOnlyAdmin
from fleet.models import LifecycleTransition, Ownership, Placement


class OpenFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "open"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        return [("yes", "Open (no end)"), ("no", "Closed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Ownership]) -> QuerySet[Ownership]:
        if self.value() == "yes":
            return queryset.filter(valid_to__isnull=True)
        if self.value() == "no":
            return queryset.filter(valid_to__isnull=False)
        return queryset


@admin.register(Ownership)
class OwnershipAdmin(ReadOnlyAdmin[Ownership]):
    list_display = ("gpu", "owner", "share", "valid_from", "valid_to", "created_by")
    list_select_related = ("gpu", "owner", "created_by")
    list_filter = (OpenFilter, "owner")
    search_fields = ("gpu__serial", "gpu__nvml_uuid", "owner__legal_name")
    date_hierarchy = "valid_from"

    @admin.display(description="share", ordering="share_bps")
    def share(self, row: Ownership) -> str:
        return row.share_percent


@admin.register(Placement)
class PlacementAdmin(ReadOnlyAdmin[Placement]):
    list_display = ("gpu", "node", "slot", "valid_from", "valid_to", "created_by")
    list_select_related = ("gpu", "node", "created_by")
    list_filter = (OpenFilter, "node__cluster__site", "node__cluster")
    search_fields = ("gpu__serial", "gpu__nvml_uuid", "node__hostname")


@admin.register(LifecycleTransition)
class LifecycleTransitionAdmin(ReadOnlyAdmin[LifecycleTransition]):
    list_display = ("gpu", "state", "at", "reason", "recorded_by")
    list_select_related = ("gpu", "recorded_by")
    list_filter = ("state",)
    search_fields = ("gpu__serial", "gpu__nvml_uuid")

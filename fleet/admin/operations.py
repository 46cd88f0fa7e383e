"""Maintenance windows and incidents: planned and opened through the services, closed or
cancelled by actions that call them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from fleet.admin import forms as console
from fleet.admin.base import AuditedAdmin, BigTableAdmin, _user
from fleet.admin.gpus import _attach
from fleet.models import Incident, IncidentDraft, MaintenanceWindow
from fleet.services import operations

_SCOPE = ("site", "cluster", "node", "gpu")


def _event_link(event_id: int | None) -> str:
    """The telemetry event's console page, by URL name (fleet does not import telemetry)."""
    if event_id is None:
        return "—"
    url = reverse("admin:telemetry_telemetryevent_change", args=[event_id])
    return format_html('<a href="{}">event {}</a>', url, event_id)


def _confirm_page(
    admin_: admin.ModelAdmin[Any],
    request: HttpRequest,
    objects: list[Any],
    form_class: type[forms.Form],
    run: Any,
    title: str,
    action: str,
) -> HttpResponse | None:
    """An action's form; on a valid POST runs ``run`` for every object (all or none)."""
    submitted = request.method == "POST" and "apply" in request.POST
    form = form_class(request.POST if submitted else None)
    if submitted and form.is_valid():
        try:
            with transaction.atomic():  # all of them or none
                for obj in objects:
                    run(obj, form.cleaned_data)
        except ValidationError as error:
            _attach(form, error)
        else:
            admin_.message_user(request, f"{title}: {len(objects)} done.", messages.SUCCESS)
            return None
    context = {
        **admin_.admin_site.each_context(request),
        "title": title,
        "opts": admin_.opts,
        "form": form,
        "targets": objects,
        "action": action,
    }
    return TemplateResponse(request, "admin/fleet/confirm_action.html", context)


class ScopedAdmin[M: (MaintenanceWindow, Incident)](AuditedAdmin[M]):
    raw_id_fields = ("gpu",)
    list_select_related = ("site", "cluster", "node", "gpu")

    @admin.display(description="scope")
    def scope_label(self, obj: MaintenanceWindow | Incident) -> str:
        scope = obj.scope
        return f"{scope._meta.verbose_name} {scope}"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The scope is what was announced; it does not change afterwards.
        return (*super().get_readonly_fields(request, obj), *(_SCOPE if obj else ()))

    def _confirm(
        self,
        request: HttpRequest,
        objects: list[Any],
        form_class: type[forms.Form],
        run: Any,
        title: str,
        action: str,
    ) -> HttpResponse | None:
        return _confirm_page(self, request, objects, form_class, run, title, action)


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(ScopedAdmin[MaintenanceWindow]):
    list_display = ("title", "scope_label", "announced_at", "starts_at", "ends_at", "cancelled_at")
    list_filter = ("site", "cluster")
    search_fields = ("title", "node__hostname", "gpu__serial")
    readonly_fields = ("cancelled_at", "created_by", "created_at")
    actions = ("cancel",)

    def write(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> Any:
        if change:
            return super().write(request, obj, form, change)
        return operations.maintenance_schedule(
            scope=obj.scope,
            title=obj.title,
            description=obj.description,
            announced_at=obj.announced_at,
            starts_at=obj.starts_at,
            ends_at=obj.ends_at,
            by=_user(request),
        )

    @admin.action(description="Cancel (or end early) the selected windows…", permissions=["change"])
    def cancel(
        self, request: HttpRequest, queryset: QuerySet[MaintenanceWindow]
    ) -> HttpResponse | None:
        def run(window: MaintenanceWindow, data: dict[str, Any]) -> None:
            operations.maintenance_cancel(
                window=window, at=data["at"], reason=data["reason"], by=_user(request)
            )

        return self._confirm(
            request,
            list(queryset),
            console.CancelMaintenanceForm,
            run,
            "Cancel maintenance",
            "cancel",
        )


@admin.register(Incident)
class IncidentAdmin(ScopedAdmin[Incident]):
    list_display = ("title", "scope_label", "cause", "started_at", "ended_at", "from_event")
    list_filter = ("cause", "site", "cluster")
    search_fields = ("title", "node__hostname", "gpu__serial")
    readonly_fields = ("ended_at", "opened_by", "created_at", "from_event")
    actions = ("close",)

    @admin.display(description="from telemetry")
    def from_event(self, obj: Incident) -> str:
        return _event_link(obj.telemetry_event_id)

    def write(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> Any:
        if change:
            return super().write(request, obj, form, change)
        return operations.incident_open(
            scope=obj.scope,
            title=obj.title,
            cause=obj.cause,
            started_at=obj.started_at,
            notes_for_owners=obj.notes_for_owners,
            internal_notes=obj.internal_notes,
            by=_user(request),
        )

    @admin.action(description="Close the selected incidents…", permissions=["change"])
    def close(self, request: HttpRequest, queryset: QuerySet[Incident]) -> HttpResponse | None:
        def run(incident: Incident, data: dict[str, Any]) -> None:
            operations.incident_close(
                incident=incident,
                ended_at=data["ended_at"],
                notes_for_owners=data["notes_for_owners"] or None,
                by=_user(request),
            )

        return self._confirm(
            request, list(queryset), console.CloseIncidentForm, run, "Close incidents", "close"
        )


@admin.register(IncidentDraft)
class IncidentDraftAdmin(BigTableAdmin[IncidentDraft]):
    """Drafts the telemetry opened: the operator confirms each with its cause (an incident is
    opened, and only then counts anywhere) or dismisses it; nothing is edited here."""

    list_display = (
        "title",
        "gpu",
        "started_at",
        "recovered_at",
        "status",
        "cause",
        "event",
        "incident",
    )
    list_filter = ("status",)
    list_select_related = ("gpu", "incident")
    search_fields = ("title", "gpu__serial")
    readonly_fields = (
        "gpu",
        "title",
        "cause",
        "started_at",
        "recovered_at",
        "status",
        "event",
        "incident",
        "decided_by",
        "decided_at",
        "created_at",
    )
    fields = readonly_fields
    actions = ("confirm", "dismiss")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A draft's page only shows it; confirming and dismissing are the actions (which its
        # page offers as buttons), never an edit.
        return obj is None and super().has_change_permission(request)

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        open_ = obj.status == IncidentDraft.Status.OPEN
        return {
            **super().page_context(request, obj),
            "can_decide": open_ and self.has_change_permission(request),
        }

    @admin.display(description="telemetry event")
    def event(self, obj: IncidentDraft) -> str:
        return _event_link(obj.telemetry_event_id)

    @admin.action(description="Confirm the selected drafts as incidents…", permissions=["change"])
    def confirm(
        self, request: HttpRequest, queryset: QuerySet[IncidentDraft]
    ) -> HttpResponse | None:
        def run(draft: IncidentDraft, data: dict[str, Any]) -> None:
            operations.incident_draft_confirm(
                draft=draft,
                cause=data["cause"],
                title=data["title"],
                notes_for_owners=data["notes_for_owners"],
                by=_user(request),
            )

        return _confirm_page(
            self,
            request,
            list(queryset),
            console.ConfirmDraftForm,
            run,
            "Confirm draft incidents",
            "confirm",
        )

    @admin.action(description="Dismiss the selected drafts…", permissions=["change"])
    def dismiss(
        self, request: HttpRequest, queryset: QuerySet[IncidentDraft]
    ) -> HttpResponse | None:
        def run(draft: IncidentDraft, data: dict[str, Any]) -> None:
            operations.incident_draft_dismiss(draft=draft, reason=data["reason"], by=_user(request))

        return _confirm_page(
            self,
            request,
            list(queryset),
            console.DismissDraftForm,
            run,
            "Dismiss draft incidents",
            "dismiss",
        )

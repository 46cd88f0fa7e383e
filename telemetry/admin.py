"""Operator console for telemetry: big-table changelists without a full COUNT(*), ingest
health, the telemetry's panel of the front page, and what the telemetry says on the GPU pages.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone

from accounts.admin_site import DashboardPanel, dashboard_panel_register, utc
from accounts.admin_toolkit import ReadOnlyAdmin
from fleet.admin.gpus import GpuAdmin
from fleet.models import Gpu, IncidentDraft
from fleet.selectors import gpu_ids_in_service
from telemetry import selectors
from telemetry.models import (
    BatchStatus,
    BootstrapToken,
    GpuState,
    GpuStateTransition,
    HourlyRollup,
    IngestBatch,
    NodeCredential,
    NodeStatus,
    RejectedRecord,
    TelemetryEvent,
)
from telemetry.selectors import (
    NO_TELEMETRY,
    StateNow,
    gpu_states_now,
    node_windows,
    nodes_coverage,
)
from telemetry.services.enrolment import bootstrap_token_issue, node_key_revoke

# How far back the console looks for a node's utilization methods and observed coverage.
RECENT = dt.timedelta(hours=1)


class BatchStatusFilter(admin.SimpleListFilter):
    """Status, as ``selectors.batches_with_status`` finds it (through the queue)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, str(label)) for value, label in BatchStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in BatchStatus.values:
            return selectors.batches_with_status(queryset, value)
        return queryset


class BigTableAdmin[M: Any](ReadOnlyAdmin[M]):
    """Raw and derived telemetry: read here, never added, edited or deleted (ingest writes it,
    retention removes it), 50 rows a page."""

    list_per_page = 50


@admin.register(IngestBatch)
class IngestBatchAdmin(BigTableAdmin[IngestBatch]):
    list_display = ("batch_id", "node", "status", "received_at", "window_count", "accepted_windows", "rejected_count", "claimed_by", "attempts")  # fmt: skip  # noqa: E501
    list_filter = (BatchStatusFilter,)
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    search_fields = ("=batch_id",)
    actions = ("requeue",)

    @admin.action(description="Re-queue selected failed batches")
    def requeue(self, request: HttpRequest, queryset: QuerySet[IngestBatch]) -> None:
        from telemetry.services.ingest import batches_requeue

        count = batches_requeue(batch_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} batches re-queued.", messages.SUCCESS)


@admin.register(RejectedRecord)
class RejectedRecordAdmin(BigTableAdmin[RejectedRecord]):
    list_display = ("recorded_at", "node", "kind", "gpu_uuid", "at", "reason", "detail")
    list_filter = ("reason", "kind")
    list_select_related = ("node",)
    raw_id_fields = ("batch", "node")


@admin.register(TelemetryEvent)
class TelemetryEventAdmin(BigTableAdmin[TelemetryEvent]):
    list_display = ("occurred_at", "node", "kind", "gpu_uuid", "xid")
    list_filter = ("kind",)
    list_select_related = ("node",)
    raw_id_fields = ("node", "gpu")


@admin.register(GpuStateTransition)
class GpuStateTransitionAdmin(BigTableAdmin[GpuStateTransition]):
    list_display = ("gpu", "state", "at", "reason")
    list_filter = ("state",)
    list_select_related = ("gpu",)
    raw_id_fields = ("gpu",)


@admin.register(HourlyRollup)
class HourlyRollupAdmin(BigTableAdmin[HourlyRollup]):
    list_display = ("gpu", "hour", "windows", "seconds_up", "seconds_down", "energy_kwh", "xid_events")  # fmt: skip  # noqa: E501
    list_select_related = ("gpu",)
    raw_id_fields = ("gpu",)
    date_hierarchy = "hour"


@admin.register(NodeStatus)
class NodeStatusAdmin(BigTableAdmin[NodeStatus]):
    list_display = ("node", "last_seen_at", "clock_skew_s", "stale", "agent_version", "driver_version")  # fmt: skip  # noqa: E501
    list_filter = ("stale",)
    list_select_related = ("node",)
    raw_id_fields = ("node",)

    def get_urls(self) -> list[Any]:
        health = path(
            "ingest-health/",
            self.admin_site.admin_view(self.ingest_health_view),
            name="telemetry_ingest_health",
        )
        windows = path(
            "<uuid:node_id>/windows/",
            self.admin_site.admin_view(self.node_windows_view),
            name="telemetry_node_windows",
        )
        return [health, windows, *super().get_urls()]

    def ingest_health_view(self, request: HttpRequest) -> HttpResponse:
        now = timezone.now()
        health = selectors.ingest_health(now=now)
        # Methods and coverage of the nodes listed, over their windows of the last hour.
        coverage = nodes_coverage(
            node_ids=[s.node_id for s in health.nodes], start=now - RECENT, end=now
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "Ingest health",
            "health": health,
            "node_rows": [(s, coverage.get(s.node_id)) for s in health.nodes],
        }
        return TemplateResponse(request, "admin/telemetry/ingest_health.html", context)

    def node_windows_view(self, request: HttpRequest, node_id: uuid.UUID) -> HttpResponse:
        """A node's windows of the last hour (or the hour before ``?before=``, ISO 8601):
        windows have a composite key, which Django's admin cannot list, so this page does."""
        status = NodeStatus.objects.select_related("node").filter(node_id=node_id).first()
        if status is None:
            raise Http404("No telemetry from this node.")
        before = timezone.now()
        if request.GET.get("before"):
            try:
                before = dt.datetime.fromisoformat(request.GET["before"])
            except ValueError:
                raise Http404("before must be an ISO 8601 instant.") from None
            if before.tzinfo is None:
                before = before.replace(tzinfo=dt.UTC)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Windows of {status.node.hostname}",
            "status": status,
            "windows": node_windows(node_id=node_id, before=before, span=RECENT),
            "before": before,
            "earlier": before - RECENT,
        }
        return TemplateResponse(request, "admin/telemetry/node_windows.html", context)


@admin.register(NodeCredential)
class NodeCredentialAdmin(admin.ModelAdmin[NodeCredential]):
    list_display = ("node", "generation", "issued_at", "revoked_at")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    readonly_fields = ("node", "generation", "key_sha256", "issued_at", "revoked_at")
    actions = ("issue_bootstrap_token", "revoke")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Issue a bootstrap token to re-enrol (shown once)")
    def issue_bootstrap_token(
        self, request: HttpRequest, queryset: QuerySet[NodeCredential]
    ) -> None:
        for credential in queryset.select_related("node"):
            token = bootstrap_token_issue(node=credential.node, by=request.user)  # type: ignore[arg-type]
            self.message_user(request, f"{credential.node.hostname}: {token}", messages.WARNING)

    @admin.action(description="Revoke the node key now")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeCredential]) -> None:
        for credential in queryset.select_related("node"):
            node_key_revoke(node=credential.node)
        self.message_user(request, "Revoked.", messages.SUCCESS)


@admin.register(BootstrapToken)
class BootstrapTokenAdmin(admin.ModelAdmin[BootstrapToken]):
    """Tokens for nodes never enrolled: add one here; the token is shown once."""

    list_display = ("node", "expires_at", "used_at", "created_by", "created_at")
    list_select_related = ("node", "created_by")
    raw_id_fields = ("node",)
    fields = ("node",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: BootstrapToken, form: Any, change: bool
    ) -> None:
        token = bootstrap_token_issue(node=obj.node, by=request.user)  # type: ignore[arg-type]
        # The service stored the row; the admin's change log needs it as obj.
        stored = BootstrapToken.objects.filter(node=obj.node).latest("created_at")
        obj.pk, obj.expires_at, obj.created_at = stored.pk, stored.expires_at, stored.created_at
        self.message_user(
            request,
            f"Bootstrap token for {obj.node.hostname} (shown once): {token}",
            messages.WARNING,
        )


# ---- the GPU pages, with what the telemetry says ----------------------------------------------


def telemetry_now_label(state: StateNow) -> str:
    """``Up since 2026-03-01 09:00 UTC`` / ``No data since …`` / ``No telemetry yet``."""
    if state.since is None and state.last_seen is None:
        return "No telemetry yet"
    label = GpuState(state.state).label if state.state in GpuState.values else state.state
    since = state.since or state.last_seen
    return f"{label} since {utc(since, seconds=False)}"


class GpuWithTelemetryAdmin(GpuAdmin):
    """The fleet's GPU pages with the telemetry's state now and recent events. Registered from
    here because the fleet cannot read telemetry (the layers run fleet <- telemetry)."""

    list_display = (  # type: ignore[assignment]
        "serial",
        "nvml_uuid",
        "model",
        "lifecycle_state",
        "telemetry_now",
        "where",
        "owners",
    )
    change_form_template = "admin/telemetry/gpu_change_form.html"

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        gpus = list(changelist.result_list)  # evaluated once; the page renders these rows
        states = gpu_states_now(gpu_ids=[g.pk for g in gpus], now=timezone.now())
        for gpu in gpus:
            gpu.telemetry_state = states.get(gpu.pk, NO_TELEMETRY)
        return changelist

    @admin.display(description="telemetry (now)")
    def telemetry_now(self, gpu: Gpu) -> str:
        state = getattr(gpu, "telemetry_state", None)
        return "—" if state is None else telemetry_now_label(state)

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        state = gpu_states_now(gpu_ids=[obj.pk], now=timezone.now()).get(obj.pk, NO_TELEMETRY)
        return {
            **super().page_context(request, obj),
            "telemetry_state": state,
            "telemetry_label": telemetry_now_label(state),
            "telemetry_events": list(
                TelemetryEvent.objects.filter(gpu=obj).order_by("-occurred_at", "-pk")[:20]
            ),
            "incident_drafts": list(
                IncidentDraft.objects.filter(gpu=obj).order_by("-started_at", "-pk")[:10]
            ),
        }


admin.site.unregister(Gpu)
admin.site.register(Gpu, GpuWithTelemetryAdmin)


# ---- the front page ---------------------------------------------------------------------------


def telemetry_panel(*, now: dt.datetime) -> dict[str, Any]:
    """GPUs in service by what the telemetry says now, stale nodes, ingest lag and backlog,
    rejected records of the last day."""
    health = selectors.ingest_health(now=now, nodes=10, rejections=0)
    in_service = gpu_ids_in_service()
    states = gpu_states_now(gpu_ids=in_service, now=now)
    counts = dict.fromkeys(GpuState.values, 0)
    for state in states.values():
        counts[state.state] = counts.get(state.state, 0) + 1
    by_state = [(value, str(label), counts[value]) for value, label in GpuState.choices]
    return {
        "telemetry": {
            "health": health,
            "by_state": by_state,
            "in_service": len(in_service),
            "never_reported": len(in_service) - len(states),
            "rejected_day": sum(n for _, n in health.rejections_by_reason),
        }
    }


dashboard_panel_register(
    DashboardPanel(
        key="telemetry",
        order=20,
        template="admin/telemetry/dashboard_panel.html",
        permission="telemetry.view_nodestatus",
        context=telemetry_panel,
    )
)

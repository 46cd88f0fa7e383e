"""Incidents and maintenance windows that affected (or will affect) the user's GPUs.

Owners see ``notes_for_owners`` and a window's description; operators' internal notes never
reach a portal page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse

from fleet.models import Incident, MaintenanceWindow
from portal.access import (
    gpus_touched,
    incident_for_user,
    incidents_for_user,
    maintenance_for_user,
    maintenance_window_for_user,
)
from portal.tables import (
    Column,
    Table,
    csv_response,
    export_of,
    fmt_hours,
    fmt_when,
    with_export_links,
)
from portal.views.common import now, owner_view, the_user

PAGE_SIZE = 25


def scope_text(scoped: Incident | MaintenanceWindow) -> str:
    if scoped.gpu_id is not None:
        return f"GPU {scoped.gpu.serial}" if scoped.gpu else "one GPU"
    if scoped.node_id is not None and scoped.node is not None:
        return f"Node {scoped.node.hostname}"
    if scoped.cluster_id is not None and scoped.cluster is not None:
        return f"Cluster {scoped.cluster}"
    return f"Site {scoped.site.name}" if scoped.site else "—"


def incident_status(incident: Incident) -> str:
    return "open" if incident.ended_at is None else "resolved"


def window_status(window: MaintenanceWindow, at: datetime) -> str:
    if window.cancelled_at is not None:
        return "cancelled"
    if at < window.starts_at:
        return "upcoming"
    if at < window.ends_at:
        return "in progress"
    return "completed"


def _seconds(start: datetime, end: datetime | None, at: datetime) -> int:
    return int(((end or at) - start).total_seconds())


def incident_table(rows: Any, *, caption: str, export_rows: Any = None) -> Table:
    at = now()
    return Table(
        name="incidents",
        caption=caption,
        columns=[
            Column(
                "Incident",
                lambda i: i.title,
                link=lambda i: reverse("portal:incident", args=[i.pk]),
            ),
            Column("Cause", lambda i: i.cause, text=lambda i: i.get_cause_display()),
            Column("Scope", scope_text),
            Column("Started", lambda i: i.started_at, text=lambda i: fmt_when(i.started_at)),
            Column(
                "Ended",
                lambda i: i.ended_at,
                text=lambda i: fmt_when(i.ended_at) if i.ended_at else "still open",
            ),
            Column(
                "Duration (h)",
                lambda i: fmt_hours(_seconds(i.started_at, i.ended_at, at)),
                numeric=True,
            ),
            Column("Status", incident_status, badge=True),
        ],
        rows=rows,
        export_rows=export_rows,
        empty="No incidents.",
    )


def maintenance_table(rows: Any, *, caption: str, export_rows: Any = None) -> Table:
    at = now()
    return Table(
        name="maintenance",
        caption=caption,
        columns=[
            Column(
                "Maintenance",
                lambda w: w.title,
                link=lambda w: reverse("portal:maintenance-window", args=[w.pk]),
            ),
            Column("Scope", scope_text),
            Column("Starts", lambda w: w.starts_at, text=lambda w: fmt_when(w.starts_at)),
            Column("Ends", lambda w: w.ends_at, text=lambda w: fmt_when(w.ends_at)),
            Column("Announced", lambda w: w.announced_at, text=lambda w: fmt_when(w.announced_at)),
            Column("Status", lambda w: window_status(w, at), badge=True),
        ],
        rows=rows,
        export_rows=export_rows,
        empty="No maintenance.",
    )


_RELATED = ("site", "cluster", "node", "gpu")


def _listing(
    request: HttpRequest, *, template: str, table: Table, page: Any, extra: dict[str, Any]
) -> HttpResponseBase:
    wanted = export_of(request, [table])
    if wanted is not None:
        return csv_response(wanted, stamp=now())
    with_export_links(request, [table])
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request, template, {"table": table, "page": page, "query": query.urlencode(), **extra}
    )


@owner_view
def incidents(request: HttpRequest) -> HttpResponseBase:
    status = request.GET.get("status", "")
    rows = incidents_for_user(user=the_user(request)).select_related(*_RELATED)
    if status == "open":
        rows = rows.filter(ended_at__isnull=True)
    elif status == "resolved":
        rows = rows.filter(ended_at__isnull=False)
    rows = rows.order_by("-started_at", "-pk")
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    table = incident_table(
        page.object_list,
        export_rows=rows.iterator(),
        caption="Incidents that affected your GPUs while you held them",
    )
    return _listing(
        request, template="portal/incidents.html", table=table, page=page, extra={"status": status}
    )


@owner_view
def incident(request: HttpRequest, incident_id: int) -> HttpResponse:
    user = the_user(request)
    found = incident_for_user(user=user, incident_id=incident_id)
    affected = list(gpus_touched(user=user, scoped=found))
    return render(
        request,
        "portal/incident.html",
        {
            "incident": found,
            "scope": scope_text(found),
            "status": incident_status(found),
            "duration": fmt_hours(_seconds(found.started_at, found.ended_at, now())),
            "affected": affected,
        },
    )


@owner_view
def maintenance(request: HttpRequest) -> HttpResponseBase:
    at = now()
    when = request.GET.get("when", "")
    rows = maintenance_for_user(user=the_user(request)).select_related(*_RELATED)
    if when == "upcoming":
        rows = rows.filter(cancelled_at__isnull=True, ends_at__gt=at)
    elif when == "past":
        rows = rows.filter(ends_at__lte=at)
    rows = rows.order_by("-starts_at", "-pk")
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    table = maintenance_table(
        page.object_list,
        export_rows=rows.iterator(),
        caption="Maintenance covering your GPUs",
    )
    return _listing(
        request, template="portal/maintenance.html", table=table, page=page, extra={"when": when}
    )


@owner_view
def maintenance_window(request: HttpRequest, window_id: int) -> HttpResponse:
    user = the_user(request)
    window = maintenance_window_for_user(user=user, window_id=window_id)
    return render(
        request,
        "portal/maintenance_window.html",
        {
            "window": window,
            "scope": scope_text(window),
            "status": window_status(window, now()),
            "duration": fmt_hours(_seconds(window.starts_at, window.ends_at, now())),
            "affected": list(gpus_touched(user=user, scoped=window)),
        },
    )

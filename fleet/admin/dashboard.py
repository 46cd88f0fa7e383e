"""The fleet's panels of the console's front page: open incidents with the draft incidents the
telemetry opened that wait for an operator (first: what needs a decision), and GPUs by
lifecycle state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from accounts.admin_site import DashboardPanel, dashboard_panel_register
from fleet import selectors


def incidents_panel(*, now: datetime) -> dict[str, Any]:
    return {"open": selectors.incidents_open(limit=10)}


def fleet_panel(*, now: datetime) -> dict[str, Any]:
    lifecycle = selectors.gpus_by_lifecycle()
    return {"lifecycle": lifecycle, "total": sum(n for _, _, n in lifecycle)}


dashboard_panel_register(
    DashboardPanel(
        key="incidents",
        order=5,
        template="admin/fleet/dashboard_incidents.html",
        permission="fleet.view_incident",
        context=incidents_panel,
    )
)
dashboard_panel_register(
    DashboardPanel(
        key="fleet",
        order=10,
        template="admin/fleet/dashboard_panel.html",
        permission="fleet.view_gpu",
        context=fleet_panel,
    )
)

"""The fleet: what exists, where it is, who owns it, and what happened to it."""

from fleet.models.inventory import (
    Cluster,
    Gpu,
    GpuModel,
    LifecycleState,
    LifecycleTransition,
    Node,
    Placement,
    Site,
)
from fleet.models.operations import (
    Incident,
    IncidentCause,
    IncidentDraft,
    MaintenanceWindow,
    operator_caused,
)
from fleet.models.ownership import Ownership, share_percent

__all__ = [
    "Cluster",
    "Gpu",
    "GpuModel",
    "Incident",
    "IncidentCause",
    "IncidentDraft",
    "LifecycleState",
    "LifecycleTransition",
    "MaintenanceWindow",
    "Node",
    "Ownership",
    "Placement",
    "Site",
    "operator_caused",
    "share_percent",
]

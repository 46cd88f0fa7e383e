"""Operator groups: what read-only operators, fleet operators, ownership officers and billing
officers may do.

Billing permissions are named by app label and codename only (fleet does not import billing).

Idempotent: running it again brings the groups back to exactly these permissions.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import Q

READ_ONLY_OPERATORS = "Operators: read-only"
FLEET_OPERATORS = "Operators: fleet"
OWNERSHIP_OFFICERS = "Operators: ownership"
BILLING_OFFICERS = "Operators: billing"

_VIEWED = {
    "fleet": [
        "site",
        "cluster",
        "node",
        "gpumodel",
        "gpu",
        "placement",
        "lifecycletransition",
        "ownership",
        "maintenancewindow",
        "incident",
        "incidentdraft",
    ],
    "accounts": ["owner", "membership", "auditentry"],
}
_FLEET_CHANGES = {
    "fleet": [
        "site",
        "cluster",
        "node",
        "gpumodel",
        "gpu",
        "maintenancewindow",
        "incident",
        "incidentdraft",
    ],
}
_FLEET_EXTRA = [("fleet", "import_gpus"), ("fleet", "move_gpu")]
_OWNERSHIP_EXTRA = [("fleet", "transfer_ownership")]
_BILLING_VIEWED = {
    "billing": [
        "period",
        "statement",
        "statementline",
        "ratecard",
        "rental",
        "poolrevenue",
        "clusterbilling",
        "payout",
        "adjustment",
    ],
}
# Revenue entry, periods, payouts and adjustments (each through a service), closing and
# publishing. Publishing still takes two of them: one requests, another approves.
_BILLING_ADDED = {
    "billing": [
        "period",
        "ratecard",
        "rental",
        "poolrevenue",
        "payout",
        "adjustment",
        "clusterbilling",
    ],
}
_BILLING_EXTRA = [("billing", "close_period"), ("billing", "publish_statement")]


def _permissions(codenames: list[tuple[str, str]]) -> list[Permission]:
    wanted = Q()
    for app_label, codename in codenames:
        wanted |= Q(content_type__app_label=app_label, codename=codename)
    found = list(Permission.objects.filter(wanted))
    if len(found) != len(codenames):
        missing = set(codenames) - {(p.content_type.app_label, p.codename) for p in found}
        raise LookupError(f"Permissions not installed (run migrate first): {sorted(missing)}")
    return found


@transaction.atomic
def operator_groups_sync() -> dict[str, Group]:
    """Creates or resets the four operator groups; returns them by name."""
    view = [(app, f"view_{model}") for app, models in _VIEWED.items() for model in models]
    change = [
        (app, f"{verb}_{model}")
        for app, models in _FLEET_CHANGES.items()
        for model in models
        for verb in ("add", "change")
    ]
    billing_view = [
        (app, f"view_{model}") for app, models in _BILLING_VIEWED.items() for model in models
    ]
    billing_add = [
        (app, f"add_{model}") for app, models in _BILLING_ADDED.items() for model in models
    ]
    plan = {
        READ_ONLY_OPERATORS: view,
        FLEET_OPERATORS: view + change + _FLEET_EXTRA,
        OWNERSHIP_OFFICERS: view + change + _FLEET_EXTRA + _OWNERSHIP_EXTRA,
        BILLING_OFFICERS: view + billing_view + billing_add + _BILLING_EXTRA,
    }
    groups: dict[str, Group] = {}
    for name, codenames in plan.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(_permissions(codenames))
        groups[name] = group
    return groups

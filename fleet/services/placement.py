"""Where a GPU sits: moving it into a node's slot, and taking it out.

A move closes the open placement at ``at`` and opens the new one from ``at``; the database
refuses a GPU in two places, or two GPUs in one slot, at any instant (migration 0002).
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from core.inputs import require_instant
from core.instants import iso_z
from fleet.models import Gpu, LifecycleState, Node, Placement
from fleet.services._common import database_rules, lock_gpus


def _describe(placement: Placement | None) -> dict[str, object] | None:
    if placement is None:
        return None
    return {
        "placement": placement.pk,
        "node": str(placement.node_id),
        "hostname": placement.node.hostname,
        "slot": placement.slot,
        "valid_from": iso_z(placement.valid_from),
        "valid_to": iso_z(placement.valid_to) if placement.valid_to else None,
    }


def _check_movable(gpu: Gpu, at: datetime) -> Placement | None:
    """The GPU's open placement, after checking it may change at ``at``."""
    if gpu.lifecycle_state == LifecycleState.RETIRED:
        raise ValidationError(
            {"gpu": f"GPU {gpu.serial} is retired; a retired GPU cannot be moved."}
        )
    latest = Placement.objects.filter(gpu=gpu).aggregate(
        start=Max("valid_from"), end=Max("valid_to")
    )
    last = max((d for d in (latest["start"], latest["end"]) if d is not None), default=None)
    if last is not None and at <= last:
        raise ValidationError(
            {
                "at": f"GPU {gpu.serial} last changed place at {iso_z(last)}; a move must be "
                "recorded after that instant."
            }
        )
    return Placement.objects.select_related("node").filter(gpu=gpu, valid_to__isnull=True).first()


@transaction.atomic
def gpu_move(
    *, gpu: Gpu, node: Node, slot: int, at: datetime, by: User | None, reason: str = ""
) -> Placement:
    """Puts ``gpu`` into ``node``'s ``slot`` (its NVML index) from ``at``, leaving where it was."""
    at = require_instant(at, field="at")
    (gpu,) = lock_gpus([gpu])
    if node.decommissioned_at is not None and node.decommissioned_at <= at:
        raise ValidationError(
            {"node": f"Node {node.hostname} was decommissioned at {iso_z(node.decommissioned_at)}."}
        )
    if not 0 <= slot < node.gpu_slots:
        raise ValidationError(
            {
                "slot": f"Node {node.hostname} has slots 0 to {node.gpu_slots - 1}; "
                f"{slot} is not one of them."
            }
        )
    current = _check_movable(gpu, at)
    if current is not None and current.node_id == node.pk and current.slot == slot:
        raise ValidationError(
            {"slot": f"GPU {gpu.serial} is already in slot {slot} of {node.hostname}."}
        )
    taken = (
        Placement.objects.select_related("gpu")
        .filter(node=node, slot=slot)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at))
        .exclude(gpu=gpu)
        .first()
    )
    if taken is not None:
        raise ValidationError(
            {
                "slot": f"Slot {slot} of {node.hostname} holds GPU {taken.gpu.serial} "
                f"from {iso_z(taken.valid_from)}; move that GPU out first."
            }
        )
    before = _describe(current)
    with database_rules(f"GPU {gpu.serial}: "):
        if current is not None:
            Placement.objects.filter(pk=current.pk).update(valid_to=at)
        placement = Placement.objects.create(
            gpu=gpu, node=node, slot=slot, valid_from=at, created_by=by
        )
    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent(
                action="gpu.move",
                object_type=gpu._meta.label_lower,
                object_id=str(gpu.pk),
                object_repr=gpu.serial,
                before={"at": iso_z(at), "placement": before},
                after={"at": iso_z(at), "placement": _describe(placement)},
            )
        ],
    )
    return placement


@transaction.atomic
def gpu_unplace(*, gpu: Gpu, at: datetime, by: User | None, reason: str) -> Placement:
    """Takes ``gpu`` out of its node at ``at`` (shipped for RMA, put on a shelf)."""
    at = require_instant(at, field="at")
    (gpu,) = lock_gpus([gpu])
    current = _check_movable(gpu, at)
    if current is None:
        raise ValidationError({"gpu": f"GPU {gpu.serial} is not in any node."})
    before = _describe(current)
    with database_rules(f"GPU {gpu.serial}: "):
        Placement.objects.filter(pk=current.pk).update(valid_to=at)
    current.valid_to = at
    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent(
                action="gpu.unplace",
                object_type=gpu._meta.label_lower,
                object_id=str(gpu.pk),
                object_repr=gpu.serial,
                before={"at": iso_z(at), "placement": before},
                after={"at": iso_z(at), "placement": None},
            )
        ],
    )
    return current

"""Sites, clusters, nodes, the GPU model catalog and GPUs: create and edit, always audited."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from core.inputs import require_instant
from core.locks import lock
from fleet.models import (
    Cluster,
    Gpu,
    GpuModel,
    Incident,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Node,
    Site,
)
from fleet.services._common import changed, database_rules, snapshot

# Fields that only their own services change: lifecycle state has dated transitions.
_GUARDED: dict[type[models.Model], set[str]] = {Gpu: {"lifecycle_state"}}


@transaction.atomic
def record_save[R: (Site, Cluster, Node, GpuModel, Gpu, MaintenanceWindow, Incident)](
    *, obj: R, by: User | None, reason: str = ""
) -> R:
    """Validates and saves a new or edited inventory record, auditing what changed.

    For a new GPU use :func:`gpu_register`, which also dates its arrival.
    """
    model = type(obj)
    label = obj._meta.label_lower
    existing = next(iter(lock(model._default_manager.filter(pk=obj.pk))), None)
    if existing is None and isinstance(obj, Gpu):
        raise ValidationError("Register new GPUs with gpu_register, which dates their arrival.")
    before = snapshot(existing) if existing is not None else None
    after = snapshot(obj)
    if before is not None:
        before, after = changed(before, after)
        guarded = _GUARDED.get(model, set()) & set(after)
        if guarded:
            field = sorted(guarded)[0]
            raise ValidationError({field: f"{field} changes only through its own service."})
        if not after:
            return obj
    obj.full_clean()
    with database_rules():
        obj.save()
    action = f"{label.split('.')[1]}.{'update' if existing is not None else 'create'}"
    audit_log(
        actor=by,
        reason=reason,
        events=[AuditEvent.of(obj, action=action, before=before, after=after)],
    )
    return obj


@transaction.atomic
def gpu_register(
    *,
    serial: str,
    nvml_uuid: str,
    model: GpuModel,
    by: User | None,
    received_at: datetime | None = None,
    reason: str = "",
) -> Gpu:
    """A new GPU, received at ``received_at`` (default: now) — its first lifecycle transition."""
    received = require_instant(
        received_at or timezone.now().replace(microsecond=0), field="received_at"
    )
    gpu = Gpu(serial=serial.strip(), nvml_uuid=nvml_uuid.strip(), model=model)
    gpu.full_clean()
    with database_rules():
        gpu.save()
        LifecycleTransition.objects.create(
            gpu=gpu, state=LifecycleState.RECEIVED, at=received, reason=reason, recorded_by=by
        )
    audit_log(
        actor=by,
        reason=reason,
        events=[AuditEvent.of(gpu, action="gpu.create", after=snapshot(gpu))],
    )
    return gpu

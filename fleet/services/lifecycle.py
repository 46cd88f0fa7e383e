"""Dated lifecycle transitions: received → burn-in → in service → maintenance / RMA → retired.

``Gpu.lifecycle_state`` mirrors the newest transition and is changed only here. Retiring a GPU
also takes it out of its node at the same instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from core.inputs import require_instant
from core.instants import iso_z
from fleet.models import Gpu, LifecycleState, LifecycleTransition, Placement
from fleet.services._common import database_rules, lock_gpus

S = LifecycleState
ALLOWED: dict[str, frozenset[str]] = {
    S.RECEIVED: frozenset({S.BURN_IN, S.IN_SERVICE, S.RMA, S.RETIRED}),
    S.BURN_IN: frozenset({S.IN_SERVICE, S.MAINTENANCE, S.RMA, S.RETIRED}),
    S.IN_SERVICE: frozenset({S.MAINTENANCE, S.RMA, S.RETIRED}),
    S.MAINTENANCE: frozenset({S.IN_SERVICE, S.BURN_IN, S.RMA, S.RETIRED}),
    S.RMA: frozenset({S.RECEIVED, S.BURN_IN, S.RETIRED}),
    S.RETIRED: frozenset(),
}


@transaction.atomic
def gpus_transition(
    *, gpus: Sequence[Gpu], state: str, at: datetime, by: User | None, reason: str = ""
) -> list[LifecycleTransition]:
    """Moves every GPU into ``state`` from ``at``; all or none of them."""
    at = require_instant(at, field="at")
    if state not in S.values:
        raise ValidationError({"state": f"Unknown lifecycle state {state!r}."})
    locked = lock_gpus(gpus)
    last = dict(
        LifecycleTransition.objects.filter(gpu__in=locked)
        .values("gpu")
        .annotate(last=Max("at"))
        .values_list("gpu", "last")
    )
    label = S(state).label
    for gpu in locked:
        if state not in ALLOWED[gpu.lifecycle_state]:
            raise ValidationError(
                {
                    "state": f"GPU {gpu.serial} is {S(gpu.lifecycle_state).label.lower()}; "
                    f"it cannot go to {label.lower()} from there."
                }
            )
        previous = last.get(gpu.pk)
        if previous is not None and at <= previous:
            raise ValidationError(
                {
                    "at": f"GPU {gpu.serial} last changed state at {iso_z(previous)}; "
                    "a transition must come after that instant."
                }
            )
    open_placements: dict[object, Placement] = {}
    if state == S.RETIRED:
        open_placements = {
            p.gpu_id: p for p in Placement.objects.filter(gpu__in=locked, valid_to__isnull=True)
        }
        late = [p for p in open_placements.values() if p.valid_from >= at]
        if late:
            raise ValidationError(
                {"at": f"A GPU was placed at {iso_z(late[0].valid_from)}, after {iso_z(at)}."}
            )
    with database_rules():
        created = LifecycleTransition.objects.bulk_create(
            [
                LifecycleTransition(gpu=gpu, state=state, at=at, reason=reason, recorded_by=by)
                for gpu in locked
            ]
        )
        Gpu.objects.filter(pk__in=[gpu.pk for gpu in locked]).update(lifecycle_state=state)
        if open_placements:
            Placement.objects.filter(pk__in=[p.pk for p in open_placements.values()]).update(
                valid_to=at
            )
    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent(
                action="gpu.lifecycle",
                object_type=gpu._meta.label_lower,
                object_id=str(gpu.pk),
                object_repr=gpu.serial,
                before={"state": gpu.lifecycle_state},
                after={
                    "state": state,
                    "at": iso_z(at),
                    **(
                        {"placement_closed": open_placements[gpu.pk].pk}
                        if gpu.pk in open_placements
                        else {}
                    ),
                },
            )
            for gpu in locked
        ],
    )
    for gpu in (*locked, *gpus):
        gpu.lifecycle_state = state
    return created

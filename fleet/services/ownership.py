"""Selling, transferring and buying back GPU shares, dated to the second.

Every change closes the affected owners' open rows at ``at`` and opens new ones from ``at``:
nothing is edited in place (the database allows only closing ``valid_to`` once). Changes to a
GPU's ownership are recorded in time order: ``at`` may not precede any instant at which the
GPU's ownership already changed. One audit entry per GPU records holdings before and after,
and one ``ownership.changed`` webhook event per GPU is written in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from accounts.models import Owner, User
from accounts.services import AuditEvent, audit_log
from core.inputs import require_instant, require_reason
from core.instants import iso_z
from fleet.models import Gpu, Ownership
from fleet.models.ownership import FULL_SHARE_BPS
from fleet.services._common import (
    check_deferred_now,
    database_rules,
    lock_gpus,
)
from webhooks.models import EventType
from webhooks.outbox import Event, events_emit

_TOTAL_CHECK = "fleet_ownership_total_at_most_10000_bps"


@dataclass(frozen=True)
class ShareTo:
    """A recipient of part of a transfer."""

    owner: Owner
    share_bps: int


# Given the GPU and its current holdings {owner_id: (owner, bps)}, the new share per owner.
Plan = Callable[[Gpu, Mapping[Any, tuple[Owner, int]]], Mapping[Any, tuple[Owner, int]]]


def ownership_sell(
    *,
    gpus: Sequence[Gpu],
    owner: Owner,
    share_bps: int,
    at: datetime,
    reason: str,
    by: User | None,
) -> list[Ownership]:
    """The operator sells ``share_bps`` of each GPU (from its unsold remainder) to ``owner``.

    An owner who already holds part of the GPU ends up with one row for the sum.
    """
    share_bps = _require_share(share_bps)

    def plan(gpu: Gpu, current: Mapping[Any, tuple[Owner, int]]) -> dict[Any, tuple[Owner, int]]:
        unsold = FULL_SHARE_BPS - sum(bps for _, bps in current.values())
        if share_bps > unsold:
            raise ValidationError(
                {
                    "share_bps": f"GPU {gpu.serial}: only {unsold} bps are unsold at {iso_z(at)}; "
                    f"cannot sell {share_bps} bps (shares may add up to at most "
                    f"{FULL_SHARE_BPS} bps)."
                }
            )
        held = current.get(owner.pk, (owner, 0))[1]
        return {**current, owner.pk: (owner, held + share_bps)}

    return _change(gpus=gpus, at=at, reason=reason, by=by, action="ownership.sell", plan=plan)


def ownership_transfer(
    *,
    gpus: Sequence[Gpu],
    from_owner: Owner,
    to: Sequence[ShareTo],
    at: datetime,
    reason: str,
    by: User | None,
) -> list[Ownership]:
    """Moves shares from ``from_owner`` to one or more owners at the same instant.

    ``from_owner`` keeps whatever is not given away (a three-way split: A gives B and C a part
    each and keeps the rest).
    """
    if not to:
        raise ValidationError({"to": "Name at least one owner to transfer to."})
    seen: set[Any] = set()
    for recipient in to:
        _require_share(recipient.share_bps)
        if recipient.owner.pk == from_owner.pk:
            raise ValidationError({"to": f"{from_owner} cannot transfer a share to itself."})
        if recipient.owner.pk in seen:
            raise ValidationError({"to": f"{recipient.owner} is named twice; name it once."})
        seen.add(recipient.owner.pk)
    given = sum(recipient.share_bps for recipient in to)

    def plan(gpu: Gpu, current: Mapping[Any, tuple[Owner, int]]) -> dict[Any, tuple[Owner, int]]:
        held = current.get(from_owner.pk, (from_owner, 0))[1]
        if held == 0:
            raise ValidationError(
                {"from_owner": f"GPU {gpu.serial}: {from_owner} holds no share at {iso_z(at)}."}
            )
        if given > held:
            raise ValidationError(
                {
                    "share_bps": f"GPU {gpu.serial}: {from_owner} holds {held} bps at "
                    f"{iso_z(at)}; cannot transfer {given} bps."
                }
            )
        new = {**current, from_owner.pk: (from_owner, held - given)}
        for recipient in to:
            before = current.get(recipient.owner.pk, (recipient.owner, 0))[1]
            new[recipient.owner.pk] = (recipient.owner, before + recipient.share_bps)
        return new

    return _change(gpus=gpus, at=at, reason=reason, by=by, action="ownership.transfer", plan=plan)


def ownership_buy_back(
    *,
    gpus: Sequence[Gpu],
    owner: Owner,
    share_bps: int | None,
    at: datetime,
    reason: str,
    by: User | None,
) -> list[Ownership]:
    """The operator buys back ``share_bps`` (None: all) of each GPU from ``owner``."""
    wanted = None if share_bps is None else _require_share(share_bps)

    def plan(gpu: Gpu, current: Mapping[Any, tuple[Owner, int]]) -> dict[Any, tuple[Owner, int]]:
        held = current.get(owner.pk, (owner, 0))[1]
        if held == 0:
            raise ValidationError(
                {"owner": f"GPU {gpu.serial}: {owner} holds no share at {iso_z(at)}."}
            )
        back = held if wanted is None else wanted
        if back > held:
            raise ValidationError(
                {
                    "share_bps": f"GPU {gpu.serial}: {owner} holds {held} bps at {iso_z(at)}; "
                    f"cannot buy back {back} bps."
                }
            )
        return {**current, owner.pk: (owner, held - back)}

    return _change(gpus=gpus, at=at, reason=reason, by=by, action="ownership.buy_back", plan=plan)


def _require_share(share_bps: int) -> int:
    if isinstance(share_bps, bool) or not isinstance(share_bps, int):
        raise ValidationError({"share_bps": "A share is a whole number of basis points."})
    if not 1 <= share_bps <= FULL_SHARE_BPS:
        raise ValidationError(
            {"share_bps": f"A share is 1 to {FULL_SHARE_BPS} bps (10,000 = the whole GPU)."}
        )
    return share_bps


def _holdings(rows: Sequence[Ownership]) -> list[dict[str, Any]]:
    return [
        {
            "ownership": row.pk,
            "owner": str(row.owner_id),
            "owner_name": row.owner.legal_name,
            "share_bps": row.share_bps,
            "valid_from": iso_z(row.valid_from),
        }
        for row in sorted(rows, key=lambda r: (r.owner.legal_name, str(r.owner_id)))
    ]


@transaction.atomic
def _change(
    *,
    gpus: Sequence[Gpu],
    at: datetime,
    reason: str,
    by: User | None,
    action: str,
    plan: Plan,
) -> list[Ownership]:
    at = require_instant(at, field="at")
    reason = require_reason(reason)
    locked = lock_gpus(gpus)
    ids = [gpu.pk for gpu in locked]
    last_change = {
        row["gpu"]: max(d for d in (row["last_start"], row["last_end"]) if d is not None)
        for row in Ownership.objects.filter(gpu__in=ids)
        .values("gpu")
        .annotate(last_start=Max("valid_from"), last_end=Max("valid_to"))
    }
    open_rows: dict[Any, list[Ownership]] = {gpu_id: [] for gpu_id in ids}
    for row in Ownership.objects.filter(gpu__in=ids, valid_to__isnull=True).select_related("owner"):
        open_rows[row.gpu_id].append(row)

    to_close: list[Ownership] = []
    to_open: list[Ownership] = []
    events: list[tuple[Gpu, list[Ownership], list[Ownership]]] = []
    for gpu in locked:
        latest = last_change.get(gpu.pk)
        if latest is not None and at < latest:
            holder = next((r for r in open_rows[gpu.pk] if r.valid_from > at), None)
            who = f"{holder.owner}'s holding began" if holder else "its ownership last changed"
            raise ValidationError(
                {
                    "at": f"GPU {gpu.serial}: {iso_z(at)} is before {iso_z(latest)}, when {who}; "
                    "ownership changes are recorded in time order, at or after that instant."
                }
            )
        current_rows = {row.owner_id: row for row in open_rows[gpu.pk]}
        current = {owner_id: (row.owner, row.share_bps) for owner_id, row in current_rows.items()}
        new = plan(gpu, current)
        closing = [
            row
            for owner_id, row in current_rows.items()
            if new.get(owner_id, (row.owner, 0))[1] != row.share_bps
        ]
        for row in closing:
            if row.valid_from == at:
                raise ValidationError(
                    {
                        "at": f"GPU {gpu.serial}: {row.owner}'s holding began at exactly "
                        f"{iso_z(at)}; make all changes at one instant in a single operation "
                        "(a transfer may name several owners)."
                    }
                )
        opening = [
            Ownership(
                gpu=gpu, owner=owner, share_bps=bps, valid_from=at, reason=reason, created_by=by
            )
            for owner_id, (owner, bps) in new.items()
            if bps > 0 and (owner_id not in current_rows or current_rows[owner_id] in closing)
        ]
        to_close.extend(closing)
        to_open.extend(opening)
        kept = [row for row in current_rows.values() if row not in closing]
        events.append((gpu, list(current_rows.values()), kept + opening))

    with database_rules():
        if to_close:
            Ownership.objects.filter(pk__in=[row.pk for row in to_close]).update(valid_to=at)
        created = Ownership.objects.bulk_create(to_open)
        check_deferred_now(_TOTAL_CHECK)

    audit_log(
        actor=by,
        reason=reason,
        events=[
            AuditEvent(
                action=action,
                object_type=gpu._meta.label_lower,
                object_id=str(gpu.pk),
                object_repr=gpu.serial,
                before={"at": iso_z(at), "holdings": _holdings(before)},
                after={
                    "at": iso_z(at),
                    "holdings": _holdings(after),
                    "closed": sorted(row.pk for row in before if row not in after),
                },
            )
            for gpu, before, after in events
        ],
    )
    events_emit(
        events=[
            _changed_event(gpu, before, after, at=at, action=action)
            for gpu, before, after in events
        ]
    )
    return created


def _changed_event(
    gpu: Gpu, before: Sequence[Ownership], after: Sequence[Ownership], *, at: datetime, action: str
) -> Event:
    """One GPU's change, for the owners whose share changed. Each owner's part (its share
    before and after) reaches only partners granted that owner; the reason, which may name
    the other party, is not sent."""
    held_before = {row.owner_id: row.share_bps for row in before}
    held_after = {row.owner_id: row.share_bps for row in after}
    changed = sorted(
        (
            o
            for o in held_before.keys() | held_after.keys()
            if held_before.get(o, 0) != held_after.get(o, 0)
        ),
        key=str,
    )
    return Event(
        type=EventType.OWNERSHIP_CHANGED,
        owner_ids=changed,
        data={
            "gpu": {"id": gpu.pk, "serial": gpu.serial, "nvml_uuid": gpu.nvml_uuid},
            "at": iso_z(at),
            "change": action.removeprefix("ownership."),
        },
        owner_data={
            str(o): {
                "share_bps_before": held_before.get(o, 0),
                "share_bps_after": held_after.get(o, 0),
            }
            for o in changed
        },
    )

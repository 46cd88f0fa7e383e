"""Helpers the fleet services share: instants, locks, database errors, snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models

from core.locks import lock
from fleet.models import Gpu


def lock_gpus(gpus: Iterable[Gpu]) -> list[Gpu]:
    """Locks the GPUs' rows in primary-key order (a fixed order cannot deadlock)."""
    ids = sorted({gpu.pk for gpu in gpus})
    if not ids:
        raise ValidationError({"gpus": "Choose at least one GPU."})
    locked = lock(Gpu.objects.select_related("model").filter(pk__in=ids))
    if len(locked) != len(ids):
        raise ValidationError({"gpus": "A chosen GPU no longer exists."})
    return locked


def check_deferred_now(*constraints: str) -> None:
    """Runs deferred constraint triggers now, so their errors surface inside the service.

    Inside an outer transaction (an admin action spanning GPUs, a test) a deferred check would
    otherwise fire only at the final COMMIT, far from the code that can explain it.
    """
    names = ", ".join(connection.ops.quote_name(name) for name in constraints)
    with connection.cursor() as cursor:
        cursor.execute(f"SET CONSTRAINTS {names} IMMEDIATE")
        cursor.execute(f"SET CONSTRAINTS {names} DEFERRED")


# Database constraint/trigger name -> the form field its failure is about.
_CONSTRAINT_FIELDS = {
    "fleet_ownership_total_at_most_10000_bps": "share_bps",
    "fleet_ownership_share_range": "share_bps",
    "fleet_ownership_owner_no_overlap": "owner",
    "fleet_ownership_positive_interval": "at",
    "fleet_ownership_append_only": "at",
    "fleet_placement_gpu_no_overlap": "gpu",
    "fleet_placement_slot_no_overlap": "slot",
    "fleet_placement_positive_interval": "at",
    "fleet_placement_append_only": "at",
    "fleet_lifecycle_one_per_instant": "at",
    "fleet_gpu_serial_key": "serial",
    "fleet_gpu_nvml_uuid_key": "nvml_uuid",
}


@contextmanager
def database_rules(context: str = "") -> Iterator[None]:
    """Turns the database's refusal (constraint, trigger) into a ValidationError on a field."""
    try:
        yield
    except IntegrityError as error:
        diag = getattr(error.__cause__, "diag", None)
        name = getattr(diag, "constraint_name", None) or ""
        primary = getattr(diag, "message_primary", None) or str(error)
        field = _CONSTRAINT_FIELDS.get(name, "__all__")
        message = f"{context}{primary}" if context else primary
        raise ValidationError({field: message}) from error


def snapshot(obj: models.Model, fields: Sequence[str] | None = None) -> dict[str, Any]:
    """The concrete field values of a row, for an audit entry's before/after."""
    names = fields or [f.attname for f in obj._meta.concrete_fields]
    return {name: getattr(obj, name) for name in names}


def changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the fields that differ, so an audit entry shows what changed and nothing else."""
    keys = [key for key in after if before.get(key) != after[key]]
    return {key: before.get(key) for key in keys}, {key: after[key] for key in keys}

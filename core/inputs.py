"""What every service asks of its inputs the same way: instants on a whole second, a reason."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError

from core.instants import iso_z


def require_instant(value: datetime, *, field: str) -> datetime:
    """Accepts aware datetimes on a whole second (slices are exact to the second), as UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError({field: f"{value} has no time zone; give an aware UTC instant."})
    if value.microsecond:
        raise ValidationError(
            {field: f"{iso_z(value)} has a fraction of a second; changes happen on whole seconds."}
        )
    return value.astimezone(UTC)


def require_reason(reason: str) -> str:
    """The reason, stripped; a blank one is refused (every audited change says why)."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "A reason is required: say why this change is made."})
    return reason

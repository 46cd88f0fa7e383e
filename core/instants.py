"""Instants as Steward writes them: the one home of each format.

Two forms, both UTC: ``iso_z`` for machines (ISO 8601 with ``Z``, e.g. in documents, CSV,
JSON and messages that name an instant exactly) and ``utc_text`` for people (``2026-03-01
09:00:00 UTC``, the console and statements). Standard library only, so the billing engine can
use it too. The statement verifier (``steward_verify``) keeps its own copy on purpose: it
imports nothing of the server.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_z(at: datetime) -> str:
    """``2026-03-01T09:00:00Z``: ISO 8601 in UTC, with its fraction of a second if it has one.

    Refuses a naive datetime: which instant it means is unknown."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{at} has no time zone: which instant it is, is unknown")
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def utc_text(at: datetime, *, seconds: bool = True) -> str:
    """``2026-03-01 09:00:00 UTC`` (``seconds=False``: ``2026-03-01 09:00 UTC``)."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{at} has no time zone: which instant it is, is unknown")
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")

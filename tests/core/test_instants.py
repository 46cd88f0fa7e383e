"""Instants are written one way for machines and one way for people (issue 21, item 9)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from core.instants import iso_z, utc_text

CET = timezone(timedelta(hours=1))


def test_machines_read_iso_8601_in_utc_with_z():
    assert iso_z(datetime(2026, 3, 1, 10, 0, tzinfo=CET)) == "2026-03-01T09:00:00Z"
    fraction = datetime(2026, 3, 1, 9, 0, 0, 250_000, tzinfo=UTC)
    assert iso_z(fraction) == "2026-03-01T09:00:00.250000Z"


def test_people_read_utc_named():
    at = datetime(2026, 3, 1, 10, 0, 30, tzinfo=CET)
    assert utc_text(at) == "2026-03-01 09:00:30 UTC"
    assert utc_text(at, seconds=False) == "2026-03-01 09:00 UTC"


@pytest.mark.parametrize("write", [iso_z, utc_text])
def test_a_naive_datetime_is_refused_not_guessed(write):
    with pytest.raises(ValueError, match="no time zone"):
        write(datetime(2026, 3, 1, 9, 0))

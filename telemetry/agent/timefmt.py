"""RFC 3339 UTC timestamps as the wire format spells them."""

from __future__ import annotations

import datetime as dt


def rfc3339_seconds(ts: float) -> str:
    """``2026-11-21T10:05:00Z`` (window starts: whole seconds)."""
    return dt.datetime.fromtimestamp(int(ts), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_ms(ts: float) -> str:
    """``2026-11-21T10:05:03.120Z`` (events: milliseconds, truncated, never rounded up)."""
    ms = int(ts * 1000)
    base = dt.datetime.fromtimestamp(ms // 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ms % 1000:03d}Z"


def parse_rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()  # 3.11+ reads a trailing Z

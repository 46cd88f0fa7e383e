"""Exponential backoff with full jitter, and Retry-After parsing."""

from __future__ import annotations

import email.utils
import random


class Backoff:
    """delay = uniform(0, min(cap, base * 2**attempt)) - "full jitter" - never below floor."""

    def __init__(
        self,
        base_s: float = 1.0,
        cap_s: float = 300.0,
        floor_s: float = 0.05,
        rng: random.Random | None = None,
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.floor_s = floor_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after_s: float | None = None) -> float:
        ceiling = min(self.cap_s, self.base_s * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        delay = max(self.floor_s, self._rng.uniform(0, ceiling))
        if retry_after_s is not None:
            # The server knows best when it will be ready; never retry before it asked.
            delay = max(delay, retry_after_s)
        return delay

    def reset(self) -> None:
        self.attempt = 0


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)

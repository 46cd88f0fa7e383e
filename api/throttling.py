"""Requests per API key over a sliding window, counted in the shared cache (Redis).

DRF's ``SimpleRateThrottle`` reads the key's whole history of request times, adds one and
writes it back: two round trips, the list pickled both ways (as long as the rate allows:
600 entries at the default), and two workers answering the same key at once each write
their own copy, so a burst spread over workers is under-counted. Here one Lua script does
the same sliding window in Redis, atomically, in one round trip: drop the times older than
the window, count, and add this request's time only if it is allowed (a refused request
is not counted, as in DRF)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiKey

# KEYS[1]: the key's sorted set of request times. ARGV: now, window (s), limit, member.
# Returns {allowed (1/0), count before this request, oldest time in the window as text}.
_SLIDING_WINDOW = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or ''
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(window))
  return {1, count, oldest}
end
return {0, count, oldest}
"""
_scripts: dict[int, Any] = {}


def _sliding_window(key: str, *, now: float, window: int, limit: int) -> tuple[bool, int, float]:
    """(allowed, requests already in the window, the oldest one's time, or ``now``)."""
    # Django's Redis cache client (``_cache``, not in its stubs) hands out the redis-py
    # client for its pool; ``config.cache`` keeps one per pool.
    backend: Any = cache
    client = backend._cache.get_client(write=True)
    script = _scripts.get(id(client))
    if script is None:
        script = _scripts[id(client)] = client.register_script(_SLIDING_WINDOW)
    member = f"{now!r}:{secrets.token_hex(4)}"  # unique, so simultaneous requests all count
    allowed, count, oldest = script(
        keys=[cache.make_and_validate_key(key)], args=[repr(now), window, limit, member]
    )
    return bool(allowed), int(count), float(oldest) if oldest else now


class ApiKeyRateThrottle(SimpleRateThrottle):
    """``API_KEY_RATE`` per key; over it DRF answers 429 with ``Retry-After``."""

    scope = "api_key"
    # Set by SimpleRateThrottle.__init__ from the rate (not in DRF's type stubs).
    num_requests: int
    duration: int

    def get_rate(self) -> str:
        return str(settings.API_KEY_RATE)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, ApiKey):
            return None
        return f"throttle:api_key:{request.auth.pk}"

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        self.now = self.timer()
        allowed, self._count, self._oldest = _sliding_window(
            key, now=self.now, window=self.duration, limit=self.num_requests
        )
        return allowed

    def wait(self) -> float | None:
        """Until the oldest request in the window leaves it (what DRF's ``wait`` gives when
        the window is exactly full; None when the rate was lowered below what it holds)."""
        available = self.num_requests - self._count + 1
        if available <= 0:
            return None
        return float(self.duration - (self.now - self._oldest)) / available

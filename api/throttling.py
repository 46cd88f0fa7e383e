"""Requests per API key over a sliding window, counted in the shared cache (Redis)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiKey


class ApiKeyRateThrottle(SimpleRateThrottle):
    """``API_KEY_RATE`` per key; over it DRF answers 429 with ``Retry-After``."""

    scope = "api_key"

    def get_rate(self) -> str:
        return str(settings.API_KEY_RATE)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, ApiKey):
            return None
        return f"throttle:api_key:{request.auth.pk}"

"""OpenAPI generation: only the partner API (the agent's endpoints are not part of it)."""

from __future__ import annotations

from typing import Any

Endpoint = tuple[str, str, str, Any]


def partner_endpoints_only(endpoints: list[Endpoint], **kwargs: Any) -> list[Endpoint]:
    return [e for e in endpoints if getattr(e[3], "__module__", "").startswith("api.")]

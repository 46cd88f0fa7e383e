"""OpenAPI generation: only the partner API (the agent's endpoints are not part of it)."""

from __future__ import annotations

from typing import Any

Endpoint = tuple[str, str, str, Any]


def partner_endpoints_only(endpoints: list[Endpoint], **kwargs: Any) -> list[Endpoint]:
    return [e for e in endpoints if getattr(e[3], "__module__", "").startswith("api.")]


_PROBLEM = {
    "type": "object",
    "description": "An RFC 9457 problem document.",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["type", "title", "status", "detail"],
}
_ERRORS = {
    "400": "The query is not valid; `errors` says why, by parameter.",
    "401": "No key, or a key that is not valid, revoked or expired.",
    "403": (
        "The key lacks the scope this endpoint needs; or, for earnings, a personal key whose "
        "maker has not acknowledged the current risk disclosure."
    ),
    "404": "No such thing, or none this key may read.",
    "406": "The Accept header asks for a type this endpoint does not serve.",
    "429": "Too many requests for this key; see Retry-After.",
}


def problem_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Documents the problem answers every operation can give (drf-spectacular lists only
    successes)."""
    result.setdefault("components", {}).setdefault("schemas", {})["Problem"] = _PROBLEM
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, description in _ERRORS.items():
                responses.setdefault(
                    status,
                    {
                        "description": description,
                        "content": {
                            "application/problem+json": {
                                "schema": {"$ref": "#/components/schemas/Problem"}
                            }
                        },
                    },
                )
            operation.setdefault("security", [{"apiKey": []}])
    return result

"""Errors as RFC 9457 problem details (``application/problem+json``)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

PROBLEM_TYPE = "https://steward.example/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"


def _detail(data: Any) -> tuple[str, dict[str, Any] | None]:
    """A sentence for ``detail`` and, for field errors, ``errors`` by field."""
    if isinstance(data, dict) and set(data) == {"detail"}:
        return str(data["detail"]), None
    if isinstance(data, dict):
        errors = {k: [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in data.items()}
        first = next(iter(errors.items()))
        return f"{first[0]}: {first[1][0]}", errors
    if isinstance(data, list) and data:
        return str(data[0]), None
    return str(data), None


def problem_response(
    *, status: int, detail: str, errors: dict[str, Any] | None = None, headers: Any = None
) -> Response:
    phrase = HTTPStatus(status).phrase
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE + phrase.lower().replace(" ", "-"),
        "title": phrase,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return Response(body, status=status, headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, then its answer rewritten as a problem document; headers such as
    ``Retry-After`` and ``WWW-Authenticate`` are kept."""
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail, errors = _detail(response.data)
    wait = getattr(exc, "wait", None)
    if isinstance(exc, exceptions.Throttled) and wait is not None:
        detail = f"Too many requests for this API key; retry in {int(wait) + 1} s."
    headers = {k: v for k, v in response.items() if k != "Content-Type"}
    return problem_response(
        status=response.status_code, detail=detail, errors=errors, headers=headers
    )

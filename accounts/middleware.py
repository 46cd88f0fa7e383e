"""Puts the request id on :data:`accounts.context.request_id_var` for the audit trail."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from accounts.context import request_id_var

_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class AuditContextMiddleware:
    """Takes a sane ``X-Request-ID`` from the request, else a fresh id.

    If the project's own request-id middleware already shares this context variable, the id
    it chose is kept as it is.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request_id_var.get() != "-":
            return self.get_response(request)
        incoming = request.headers.get("X-Request-ID", "")
        token = request_id_var.set(incoming if _SANE.match(incoming) else uuid.uuid4().hex)
        try:
            return self.get_response(request)
        finally:
            request_id_var.reset(token)

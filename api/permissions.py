"""One permission per scope: the key must carry it (what it may read is ``api.access``)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts.models import ApiScope
from api.access import Caller, earnings_refusal


class _HasScope(BasePermission):
    scope: str = ""

    def has_permission(self, request: Request, view: Any) -> bool:
        caller: Any = request.user
        if not isinstance(caller, Caller):
            return False
        if self.scope not in caller.scopes:
            self.message = f"This API key lacks the scope {self.scope}."
            return False
        return True


class FleetRead(_HasScope):
    scope = ApiScope.FLEET_READ


class TelemetryRead(_HasScope):
    scope = ApiScope.TELEMETRY_READ


class StatementsRead(_HasScope):
    """Earnings: the scope, and for a personal key its maker's acknowledgement of the current
    risk disclosure (``api.access.earnings_refusal``), refused with 403 and what to do."""

    scope = ApiScope.STATEMENTS_READ

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        caller: Any = request.user  # a Caller: the scope check above made sure
        refusal = earnings_refusal(caller=caller)
        if refusal is not None:
            self.message = refusal
            return False
        return True


class AnyScope(BasePermission):
    """Any valid key (what it sees is still limited by its grants)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        caller: Any = request.user
        return isinstance(caller, Caller)

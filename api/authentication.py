"""API keys: ``Authorization: Bearer stw_live_<prefix>_<secret>``."""

from __future__ import annotations

import hmac
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from accounts import services as accounts
from accounts.models import ApiKey
from api import access
from api.access import Caller


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Finds the key by its prefix and compares the token's SHA-256 in constant time. The same
    query reads what the key may reach (``api.access.key_for_request``), every request.

    A revoked or expired key, a key whose partner or user is gone, a partner key whose maker no
    longer belongs to the partner (left it, and is no operator), answers 401 with the reason;
    use is recorded at most once a minute (``accounts.services.api_key_touch``).
    """

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Caller, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme != self.keyword or not token.strip():
            raise exceptions.AuthenticationFailed(
                "Send the key as 'Authorization: Bearer stw_live_…'."
            )
        parsed = accounts.api_key_parse(token.strip())
        found = access.key_for_request(prefix=parsed[0]) if parsed is not None else None
        if found is None or not hmac.compare_digest(
            found.key.secret_sha256, accounts.api_key_hash(parsed[1] if parsed else "")
        ):
            raise exceptions.AuthenticationFailed("This API key is not valid.")
        key = found.key
        now = timezone.now()
        if key.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This API key was revoked.")
        if key.expires_at <= now:
            raise exceptions.AuthenticationFailed("This API key has expired.")
        if not key.created_by.is_active:
            raise exceptions.AuthenticationFailed("The user who made this API key is inactive.")
        if not found.maker_belongs:
            # As a personal key stops when its maker leaves the owner account: the key was
            # made on the partner's behalf by someone who no longer acts for it.
            raise exceptions.AuthenticationFailed(
                "The user who made this API key no longer belongs to its partner."
            )
        accounts.api_key_touch(key=key, at=now)
        # What the key may read, as read in the same query: ``api.access`` asks no more.
        caller = Caller(
            key=key,
            _owner_ids=found.owner_ids,
            disclosure_version=found.disclosure_version,
            disclosure_acknowledged=found.disclosure_acknowledged,
        )
        return caller, key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="steward"'


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "stw_live_<prefix>_<secret>",
        }

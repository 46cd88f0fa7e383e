"""The portal's settings, read from django.conf with their defaults.

Deployments may set them in ``config/settings`` (see docs/portal.md); the defaults are the
documented behaviour.
"""

from __future__ import annotations

from django.conf import settings


def _int(name: str, default: int) -> int:
    value = getattr(settings, name, default)
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"Setting {name} must be a positive integer, not {value!r}.")
    return value


def login_fail_limit_account() -> int:
    """Failed logins (password or code) for one account before it is locked for a while."""
    return _int("PORTAL_LOGIN_FAILURES_PER_ACCOUNT", 5)


def login_fail_limit_ip() -> int:
    """Failed logins from one IP address, whatever the account, before it is locked."""
    return _int("PORTAL_LOGIN_FAILURES_PER_IP", 20)


def login_fail_window_s() -> int:
    """Failures are counted over this many seconds; a lockout lasts as long."""
    return _int("PORTAL_LOGIN_LOCKOUT_S", 15 * 60)


def second_factor_timeout_s() -> int:
    """How long a password that was accepted waits for its second factor."""
    return _int("PORTAL_SECOND_FACTOR_TIMEOUT_S", 5 * 60)


def notices_per_task() -> int:
    return _int("PORTAL_NOTICES_PER_TASK", 500)


def notice_retention_days() -> int:
    """Days a notice stays in the portal's list after it was first shown."""
    return _int("PORTAL_NOTICE_RETENTION_DAYS", 365)


def base_url() -> str:
    """Where the portal is reached, for links in emails (no trailing slash)."""
    value = getattr(settings, "PORTAL_BASE_URL", "http://localhost:8000")
    return str(value).rstrip("/")

"""Throttling failed logins, per account and per IP address, in Redis (Django's cache).

Failures are counted in a fixed window that starts at the first failure; reaching the limit
locks the account (or the address) for the window's length. A lock stores the instant it
ends, so the page can say when to try again. A success clears the account's count; the
address's count runs out on its own, so one valid login cannot reset a guessing campaign.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache

from portal import conf

_PREFIX = "portal:login"


@dataclass(frozen=True)
class Lockout:
    scope: str  # "account" | "address"
    until: datetime

    def retry_after_s(self, *, now: datetime) -> int:
        return max(1, math.ceil((self.until - now).total_seconds()))

    def message(self, *, now: datetime) -> str:
        minutes = math.ceil(self.retry_after_s(now=now) / 60)
        what = "this account" if self.scope == "account" else "your network address"
        return (
            f"Too many failed attempts for {what}. Logging in is paused for "
            f"{minutes} minute{'s' if minutes != 1 else ''}; try again after that, or reset "
            "your password."
        )


def _keys(*, email: str, ip: str | None) -> dict[str, str]:
    account = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
    keys = {"account": f"{_PREFIX}:account:{account}"}
    if ip:
        keys["address"] = f"{_PREFIX}:address:{ip}"
    return keys


def login_lockout(*, email: str, ip: str | None, now: datetime) -> Lockout | None:
    """The lock in force for this account or address at ``now``, if any."""
    keys = _keys(email=email, ip=ip)
    locks = cache.get_many([f"{key}:lock" for key in keys.values()])
    for scope, key in keys.items():
        until = locks.get(f"{key}:lock")
        if until is not None and until > now.timestamp():
            return Lockout(scope=scope, until=datetime.fromtimestamp(until, tz=now.tzinfo))
    return None


def login_failure_record(*, email: str, ip: str | None, now: datetime) -> Lockout | None:
    """Counts one failed attempt (wrong password or wrong code); returns the lock it caused."""
    window = conf.login_fail_window_s()
    limits = {"account": conf.login_fail_limit_account(), "address": conf.login_fail_limit_ip()}
    caused: Lockout | None = None
    for scope, key in _keys(email=email, ip=ip).items():
        cache.add(f"{key}:count", 0, timeout=window)
        try:
            count = cache.incr(f"{key}:count")
        except ValueError:  # expired between add and incr
            cache.set(f"{key}:count", 1, timeout=window)
            count = 1
        if count >= limits[scope]:
            until = now.timestamp() + window
            cache.set(f"{key}:lock", until, timeout=window)
            cache.delete(f"{key}:count")
            caused = caused or Lockout(
                scope=scope, until=datetime.fromtimestamp(until, tz=now.tzinfo)
            )
    return caused


def login_success_record(*, email: str) -> None:
    key = _keys(email=email, ip=None)["account"]
    cache.delete(f"{key}:count")

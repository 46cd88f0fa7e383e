"""Typed, loud readers for settings that come from the environment.

Every helper fails with ``ImproperlyConfigured`` naming the variable and what was wrong,
so a misconfigured deployment stops at start-up instead of misbehaving later.
Secrets may also be given as ``NAME_FILE`` pointing at a file (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


class _Missing:
    pass


MISSING: Final = _Missing()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    file_name = os.environ.get(f"{name}_FILE")
    if value is not None and file_name is not None:
        raise ImproperlyConfigured(f"Set {name} or {name}_FILE, not both.")
    if file_name is not None:
        try:
            return Path(file_name).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name} cannot be read: {exc}") from exc
    return value


def env_str(name: str, default: str | _Missing = MISSING, *, hint: str = "") -> str:
    """A string; required unless a default is given. ``hint`` says how to set it."""
    value = _raw(name)
    if value is None or value == "":
        if isinstance(default, _Missing):
            raise ImproperlyConfigured(f"{name} is not set. {hint}".strip())
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0).")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    return number


def env_list(name: str, default: list[str] | _Missing = MISSING, *, hint: str = "") -> list[str]:
    """A comma-separated list; empty items are dropped."""
    value = _raw(name)
    if value is None or not value.strip():
        if isinstance(default, _Missing):
            raise ImproperlyConfigured(f"{name} is not set. {hint}".strip())
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict[str, Any]:
    """Django DATABASES entry for a ``postgresql://user:pass@host:port/db?opt=…`` URL.

    A ``host`` query parameter (a socket directory, as embedded PostgreSQL reports) wins
    over the network location; other query parameters become libpq options.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"{name} must be a postgresql:// URL; got scheme {parts.scheme!r}. "
            "Steward runs on PostgreSQL only."
        )
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ImproperlyConfigured(f"{name} names no database (…/DBNAME at the end).")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    host = options.pop("host", None) or parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has an invalid port.") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port or ""),
        "OPTIONS": options,
    }


@dataclass(frozen=True)
class RedisUrls:
    """One Redis server, spelled the way each client wants it."""

    cache: str  # redis-py / Django's RedisCache
    celery: str  # kombu broker and result backend


def redis_from_url(url: str, *, name: str = "REDIS_URL") -> RedisUrls:
    """Accepts ``redis://``, ``rediss://`` and ``unix:///path/redis.socket?db=N``."""
    parts = urlsplit(url)
    if parts.scheme in {"redis", "rediss"}:
        return RedisUrls(cache=url, celery=url)
    if parts.scheme == "unix":
        if not parts.path:
            raise ImproperlyConfigured(f"{name} unix:// URL needs a socket path.")
        db = parse_qs(parts.query).get("db", ["0"])[-1]
        return RedisUrls(
            cache=f"unix://{parts.path}?db={db}",
            celery=f"redis+socket://{parts.path}?virtual_host={db}",
        )
    raise ImproperlyConfigured(
        f"{name} must be redis://, rediss:// or unix:// ; got scheme {parts.scheme!r}."
    )

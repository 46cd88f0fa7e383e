"""Bootstrap tokens and node keys: issue, enrol, rotate, revoke."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from core.locks import lock
from fleet.models import Node
from telemetry.keys import node_key_derive, node_key_sha256
from telemetry.models import BootstrapToken, NodeCredential, NodeStatus

BOOTSTRAP_TOKEN_PREFIX = "stb_"  # noqa: S105 - a public marker, not a secret


def _token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bootstrap_token_issue(*, node: Node, by: User | None, ttl: dt.timedelta | None = None) -> str:
    """A one-time token for node's agent; returned once, stored only as its SHA-256.

    It starts with a fixed prefix: a bare URL-safe token starts with "-" one time in 64, and
    ``steward-agent --bootstrap-token -…`` would then read it as an option."""
    token = f"{BOOTSTRAP_TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    ttl = ttl or dt.timedelta(seconds=settings.TELEMETRY_BOOTSTRAP_TOKEN_TTL_S)
    BootstrapToken.objects.create(
        node=node,
        token_sha256=_token_sha256(token),
        expires_at=timezone.now() + ttl,
        created_by=by,
    )
    return token


@dataclass(frozen=True)
class Enrolment:
    node_id: str
    node_key: str


class EnrolmentRefused(Exception):
    pass


def bootstrap_token_check(*, bootstrap_token: str) -> None:
    """Raises EnrolmentRefused unless the token could enrol now. The enrol endpoint asks
    before it decodes the rest of the request, so that no one without a token reaches that
    decoder; ``node_enrol`` checks again under a lock, and spends the token."""
    usable = BootstrapToken.objects.filter(
        token_sha256=_token_sha256(bootstrap_token),
        used_at__isnull=True,
        expires_at__gt=timezone.now(),
    ).exists()
    if not usable:
        raise EnrolmentRefused("The bootstrap token is unknown, used or expired.")


@transaction.atomic
def node_enrol(*, bootstrap_token: str, hostname: str, gpus: list[dict[str, Any]]) -> Enrolment:
    """Spends the token (once) and issues the node a key of a new generation."""
    now = timezone.now()
    tokens = BootstrapToken.objects.select_related("node")
    token = next(iter(lock(tokens.filter(token_sha256=_token_sha256(bootstrap_token)))), None)
    if token is None or token.used_at is not None or token.expires_at <= now:
        raise EnrolmentRefused("The bootstrap token is unknown, used or expired.")
    if token.node.hostname != hostname:
        raise EnrolmentRefused(
            f"The bootstrap token was issued for {token.node.hostname}, not {hostname}."
        )
    token.used_at = now
    token.save(update_fields=["used_at"])
    key = _credential_next_generation(node=token.node, now=now)
    NodeStatus.objects.update_or_create(
        node=token.node, defaults={"reported_gpus": gpus, "enrolled_at": now}
    )
    return Enrolment(node_id=str(token.node_id), node_key=key)


def node_key_rotate(*, node: Node) -> str:
    """A new key generation; the previous key stops working at once."""
    with transaction.atomic():
        return _credential_next_generation(node=node, now=timezone.now())


def node_key_revoke(*, node: Node) -> None:
    if not NodeCredential.objects.filter(node=node).update(revoked_at=timezone.now()):
        raise ValidationError(f"Node {node} has no key to revoke.")


def _credential_next_generation(*, node: Node, now: dt.datetime) -> str:
    credential = next(iter(lock(NodeCredential.objects.filter(node=node))), None)
    generation = 1 if credential is None else credential.generation + 1
    key = node_key_derive(node_id=node.id, generation=generation)
    NodeCredential.objects.update_or_create(
        node=node,
        defaults={
            "generation": generation,
            "key_sha256": node_key_sha256(key),
            "issued_at": now,
            "revoked_at": None,
        },
    )
    return key

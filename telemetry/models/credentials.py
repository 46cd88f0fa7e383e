"""How a node proves who it is: a one-time bootstrap token, then a derived node key.

The server never stores a node key. It is ``HMAC-SHA256(STEWARD_NODE_KEY_SECRET,
"{node_id}:{generation}")``, derived when issued and again when verifying; the database keeps
only the generation and the key's SHA-256, so a database leak alone cannot forge signatures,
and bumping the generation revokes the old key.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils import timezone

from accounts.models import User
from fleet.models import Node


class BootstrapToken(models.Model):
    """A one-time, expiring token an operator hands to a node's agent to enrol it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    token_sha256 = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"bootstrap token for {self.node_id} (expires {self.expires_at:%Y-%m-%d %H:%M})"


class NodeCredential(models.Model):
    """The current key generation of a node; ``revoked_at`` set means no key is valid."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, related_name="telemetry_credential"
    )
    generation = models.PositiveIntegerField(default=1)
    key_sha256 = models.CharField(max_length=64)
    issued_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["node"]

    def __str__(self) -> str:
        return f"{self.node_id} key generation {self.generation}"

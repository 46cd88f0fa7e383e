"""Turning an owner's second factor off (enrolment and recovery codes: accounts.services)."""

from __future__ import annotations

from django.db import transaction
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.models import User
from accounts.services import AuditEvent, audit_log


@transaction.atomic
def two_factor_disable(*, user: User) -> None:
    """Removes the user's authenticator and recovery codes; the next login asks for none."""
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    audit_log(
        actor=user,
        events=[AuditEvent.of(user, action="2fa.disable")],
        reason="Owner turned two-factor authentication off.",
    )

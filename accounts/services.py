"""Writes for people and organisations. Callers validate input shape; these enforce rules."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Self

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone
from django.utils.text import slugify
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.context import request_id_var
from accounts.models import (
    ApiKey,
    AuditEntry,
    Disclosure,
    DisclosureAcknowledgement,
    Membership,
    Owner,
    Partner,
    PartnerGrant,
    PartnerMember,
    User,
    validate_scopes,
)
from core.locks import lock


def user_create(
    *,
    email: str,
    password: str | None,
    full_name: str = "",
    is_staff: bool = False,
    is_superuser: bool = False,
) -> User:
    """Creates a user; the email is the login and is compared case-insensitively."""
    email = User.objects.normalize_email(email).lower()
    if User.objects.filter(email__iexact=email).exists():
        raise ValidationError({"email": f"A user with the email {email} already exists."})
    return User.objects.create_user(
        email, password, full_name=full_name, is_staff=is_staff, is_superuser=is_superuser
    )


@transaction.atomic
def owner_create(
    *,
    kind: str,
    legal_name: str,
    contact_email: str,
    billing_currency: str = "USD",
    time_zone: str = "UTC",
    postal_address: str = "",
) -> Owner:
    """A new owner account; the database gives it its account number."""
    owner = Owner(
        kind=kind,
        legal_name=legal_name,
        contact_email=contact_email,
        billing_currency=billing_currency,
        time_zone=time_zone,
        postal_address=postal_address.strip(),
    )
    owner.full_clean()
    owner.save()
    return owner


def membership_grant(*, user: User, owner: Owner, role: str) -> Membership:
    """Lets user act for owner in role; granting again changes the role."""
    if role not in Membership.Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use admin or viewer."})
    membership, _ = Membership.objects.update_or_create(
        user=user, owner=owner, defaults={"role": role}
    )
    return membership


@transaction.atomic
def partner_create(*, name: str, contact_email: str, handle: str = "") -> Partner:
    """A partner; its public ``handle`` defaults to its name as a slug."""
    handle = (handle or slugify(name))[:50]
    if Partner.objects.filter(handle=handle).exists():
        raise ValidationError({"handle": f"The handle {handle} is taken; choose another."})
    partner = Partner(name=name, contact_email=contact_email, handle=handle)
    partner.full_clean()
    partner.save()
    return partner


def partner_member_add(*, user: User, partner: Partner) -> PartnerMember:
    member, _ = PartnerMember.objects.get_or_create(user=user, partner=partner)
    return member


@dataclass(frozen=True)
class AuditEvent:
    """One change to audit; ``before``/``after`` are JSON-able snapshots (None: did not exist)."""

    action: str
    object_type: str
    object_id: str
    object_repr: str = ""
    before: Any = None
    after: Any = None

    @classmethod
    def of(cls, obj: models.Model, *, action: str, before: Any = None, after: Any = None) -> Self:
        """An event about ``obj``, named by its ``app_label.model`` and primary key."""
        return cls(
            action=action,
            object_type=obj._meta.label_lower,
            object_id=str(obj.pk),
            object_repr=str(obj)[:200],
            before=before,
            after=after,
        )


def audit_log(
    *,
    actor: User | None,
    events: Sequence[AuditEvent],
    reason: str = "",
    at: datetime | None = None,
    request_id: str | None = None,
) -> list[AuditEntry]:
    """Writes one audit entry per event, all in one INSERT, sharing actor, reason and instant.

    ``request_id`` defaults to the id of the request being served (see ``accounts.context``).
    """
    if not events:
        return []
    stamp = at or timezone.now()
    rid = request_id if request_id is not None else request_id_var.get()
    return AuditEntry.objects.bulk_create(
        [
            AuditEntry(
                at=stamp,
                actor=actor if actor is not None and actor.is_authenticated else None,
                action=event.action,
                object_type=event.object_type,
                object_id=event.object_id,
                object_repr=event.object_repr,
                reason=reason,
                before=event.before,
                after=event.after,
                request_id="" if rid == "-" else rid,
            )
            for event in events
        ]
    )


RECOVERY_CODE_COUNT = 10
TOTP_DIGITS = 6
_TOTP_DEVICE_NAME = "Authenticator app"
_RECOVERY_DEVICE_NAME = "Recovery codes"


def totp_enrolment_start(*, user: User) -> TOTPDevice:
    """The user's pending (unconfirmed) authenticator, created on first call.

    The same pending device is returned until it is confirmed, so reloading the enrolment page
    does not invalidate a QR code already scanned.
    """
    pending = TOTPDevice.objects.filter(user=user, confirmed=False).order_by("pk").first()
    if pending is not None:
        return pending
    device: TOTPDevice = TOTPDevice.objects.create(
        user=user, name=_TOTP_DEVICE_NAME, confirmed=False
    )
    return device


@transaction.atomic
def totp_enrolment_confirm(*, device: TOTPDevice, token: str) -> list[str]:
    """Confirms ``device`` with a code it generated; returns fresh recovery codes (shown once).

    Other pending devices of the user are removed, and any earlier recovery codes replaced.
    """
    if device.confirmed:
        raise ValidationError({"token": "This authenticator is already confirmed."})
    if not device.verify_token(token.strip().replace(" ", "")):
        raise ValidationError(
            {"token": "That code does not match; check the app's clock and enter the newest code."}
        )
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    TOTPDevice.objects.filter(user_id=device.user_id, confirmed=False).delete()
    user = User.objects.get(pk=device.user_id)
    codes = _recovery_codes_replace(user=user)
    audit_log(
        actor=user,
        events=[AuditEvent.of(user, action="2fa.enrol", after={"device": device.persistent_id})],
        reason="The user enrolled an authenticator app.",
    )
    return codes


@transaction.atomic
def recovery_codes_regenerate(*, user: User) -> list[str]:
    """Replaces the user's recovery codes with new ones; the old ones stop working."""
    codes = _recovery_codes_replace(user=user)
    audit_log(
        actor=user,
        events=[AuditEvent.of(user, action="2fa.recovery_codes_regenerated")],
        reason="The user regenerated their recovery codes.",
    )
    return codes


def _recovery_codes_replace(*, user: User) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=_RECOVERY_DEVICE_NAME, confirmed=True)
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create([StaticToken(device=device, token=code) for code in codes])
    return codes


@transaction.atomic
def totp_device_provision(*, user: User, key_hex: str, by: User | None) -> TOTPDevice:
    """Gives ``user`` a confirmed authenticator with a known key (demo and provisioning).

    Replaces the user's authenticator devices; recovery codes are left as they are.
    """
    TOTPDevice.objects.filter(user=user).delete()
    device: TOTPDevice = TOTPDevice(user=user, name=_TOTP_DEVICE_NAME, key=key_hex, confirmed=True)
    device.full_clean()
    device.save()
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(user, action="2fa.provision", after={"device": device.persistent_id})
        ],
        reason="Authenticator provisioned with a known key.",
    )
    return device


def otp_device_verify(*, user: User, token: str) -> Device | None:
    """The user's confirmed device that accepts ``token``, or None.

    Six digits are tried against authenticator apps, anything else against recovery codes,
    so a mistyped code never counts as a failed attempt on the other kind of device.
    """
    token = token.strip().replace(" ", "").lower()
    devices: list[Device]
    if token.isdigit() and len(token) == TOTP_DIGITS:
        devices = list(TOTPDevice.objects.filter(user=user, confirmed=True).order_by("pk"))
    else:
        devices = list(StaticDevice.objects.filter(user=user, confirmed=True).order_by("pk"))
    for device in devices:
        with transaction.atomic():
            if device.verify_is_allowed()[0] and device.verify_token(token):
                return device
    return None


STANDARD_DISCLOSURE_VERSION = "2026-01"
STANDARD_DISCLOSURE_TEXT = (
    "Owning GPUs does not guarantee any outcome. The earnings shown for your GPUs are not "
    "guaranteed: they depend on utilization, uptime, demand, costs, hardware performance and "
    "market conditions, and they can be zero. Every figure states its period, whether it is "
    "final or preliminary, whether it is gross or net and which costs it includes. Past "
    "results say nothing about future results, and Steward shows no projection or forecast "
    "of earnings."
)


def disclosure_publish(*, version: str, text: str, at: datetime | None = None) -> Disclosure:
    """Publishes a new disclosure version; the text is stored exactly as given."""
    if not version.strip():
        raise ValidationError({"version": "Give the version a label."})
    if not text.strip():
        raise ValidationError({"text": "A disclosure needs its text."})
    if Disclosure.objects.filter(version=version).exists():
        raise ValidationError(
            {"version": f"Version {version} exists; a new wording needs a new version."}
        )
    return Disclosure.objects.create(
        version=version,
        text=text,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
        published_at=at or timezone.now(),
    )


@transaction.atomic
def disclosure_standard_ensure() -> Disclosure:
    """The first version (the standard text) if no disclosure was ever published; otherwise
    the current one. Safe to call at every start."""
    published = lock(Disclosure.objects.filter(published_at__isnull=False))
    if published:
        return max(published, key=lambda d: (d.published_at, d.created_at))
    return disclosure_publish(version=STANDARD_DISCLOSURE_VERSION, text=STANDARD_DISCLOSURE_TEXT)


def disclosure_acknowledge(
    *, user: User, disclosure: Disclosure, ip: str | None, user_agent: str
) -> DisclosureAcknowledgement:
    if disclosure.published_at is None:
        raise ValidationError({"disclosure": "Only a published disclosure can be acknowledged."})
    acknowledgement, _ = DisclosureAcknowledgement.objects.get_or_create(
        user=user, disclosure=disclosure, defaults={"ip": ip, "user_agent": user_agent[:1000]}
    )
    return acknowledgement


API_KEY_TOKEN_PREFIX = "stw_live_"  # noqa: S105 - a public marker, not a secret
API_KEY_MAX_LIFETIME = timedelta(days=366)
# last_used_at is written at most once per this interval per key, never on every request.
API_KEY_TOUCH_INTERVAL = timedelta(minutes=1)


def api_key_hash(token: str) -> str:
    """The stored form of a token: SHA-256 of the whole token (its secret has 256 bits)."""
    return hashlib.sha256(token.encode()).hexdigest()


def api_key_parse(token: str) -> tuple[str, str] | None:
    """``(prefix, token)`` for a well-formed token, else None."""
    if not token.startswith(API_KEY_TOKEN_PREFIX):
        return None
    prefix, sep, secret = token.removeprefix(API_KEY_TOKEN_PREFIX).partition("_")
    if not sep or not prefix.isalnum() or len(secret) < 32:
        return None
    return prefix, token


def _scopes_clean(scopes: Sequence[str]) -> list[str]:
    cleaned = sorted(set(scopes))
    validate_scopes(cleaned)
    return cleaned


def _is_admin(*, user: User, owner: Owner) -> bool:
    return Membership.objects.filter(
        user_id=user.pk, owner_id=owner.pk, role=Membership.Role.ADMIN
    ).exists()


@transaction.atomic
def api_key_create(
    *,
    name: str,
    scopes: Sequence[str],
    expires_at: datetime,
    by: User,
    partner: Partner | None = None,
    owner: Owner | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its token; the token is returned once and never stored.

    A partner key is made by one of the partner's users or an operator; a personal key
    (``owner``) by a member of that owner account, and reads only that account.
    """
    if (partner is None) == (owner is None):
        raise ValidationError("A key belongs to a partner or to an owner account, not both.")
    if not name.strip():
        raise ValidationError({"name": "Name the key, so it can be told apart from others."})
    now = timezone.now()
    if expires_at.tzinfo is None or not now < expires_at <= now + API_KEY_MAX_LIFETIME:
        raise ValidationError(
            {"expires_at": "Give an aware instant in the future, at most 366 days ahead."}
        )
    if partner is not None and not (
        by.is_staff or PartnerMember.objects.filter(user_id=by.pk, partner=partner).exists()
    ):
        raise ValidationError("Only the partner's users or an operator can make its keys.")
    if owner is not None and not Membership.objects.filter(user_id=by.pk, owner=owner).exists():
        raise ValidationError("Only a member of the owner account can make its personal keys.")
    prefix = secrets.token_hex(6)
    token = f"{API_KEY_TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        prefix=prefix,
        secret_sha256=api_key_hash(token),
        name=name.strip(),
        scopes=_scopes_clean(scopes),
        partner=partner,
        owner=owner,
        created_by=by,
        created_at=now,
        expires_at=expires_at,
    )
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                key,
                action="api_key.create",
                after={"scopes": key.scopes, "expires_at": expires_at.isoformat()},
            )
        ],
    )
    return key, token


@transaction.atomic
def api_key_revoke(*, key: ApiKey, by: User) -> ApiKey:
    """Revokes the key; its next request is refused. Revoking twice changes nothing."""
    now = timezone.now()
    if ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=now) == 1:
        audit_log(actor=by, events=[AuditEvent.of(key, action="api_key.revoke")], at=now)
    key.refresh_from_db(fields=["revoked_at"])
    return key


def api_key_touch(*, key: ApiKey, at: datetime) -> bool:
    """Records use of ``key`` at most once per ``API_KEY_TOUCH_INTERVAL`` (compare-and-set:
    concurrent requests write once). True when this call wrote."""
    if key.last_used_at is not None and at - key.last_used_at < API_KEY_TOUCH_INTERVAL:
        return False
    stale = models.Q(last_used_at__isnull=True) | models.Q(
        last_used_at__lt=at - API_KEY_TOUCH_INTERVAL
    )
    written = ApiKey.objects.filter(stale, pk=key.pk).update(last_used_at=at) == 1
    if written:
        key.last_used_at = at
    return written


@transaction.atomic
def partner_grant_create(
    *, owner: Owner, partner: Partner, scopes: Sequence[str], by: User
) -> PartnerGrant:
    """Lets ``partner`` read ``owner``'s data within ``scopes``; replaces a live grant."""
    if not (by.is_staff or _is_admin(user=by, owner=owner)):
        raise ValidationError("Only an admin of the owner account can grant partner access.")
    now = timezone.now()
    live = PartnerGrant.objects.filter(owner=owner, partner=partner, revoked_at__isnull=True)
    before = [g.scopes for g in lock(live)]
    live.update(revoked_at=now, revoked_by=by)
    grant = PartnerGrant.objects.create(
        owner=owner, partner=partner, scopes=_scopes_clean(scopes), granted_by=by, granted_at=now
    )
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                grant,
                action="partner_grant.create",
                before=before[0] if before else None,
                after=grant.scopes,
            )
        ],
        at=now,
    )
    return grant


@transaction.atomic
def partner_grant_revoke(*, grant: PartnerGrant, by: User) -> PartnerGrant:
    """Ends the grant; the partner's next request no longer sees the owner's data."""
    owner = Owner.objects.get(pk=grant.owner_id)
    if not (by.is_staff or _is_admin(user=by, owner=owner)):
        raise ValidationError("Only an admin of the owner account can revoke partner access.")
    now = timezone.now()
    if (
        PartnerGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=by
        )
        == 1
    ):
        audit_log(actor=by, events=[AuditEvent.of(grant, action="partner_grant.revoke")], at=now)
    grant.refresh_from_db(fields=["revoked_at", "revoked_by"])
    return grant

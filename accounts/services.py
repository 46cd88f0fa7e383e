"""Writes for people and organisations. Callers validate input shape; these enforce rules."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.models import Membership, Owner, Partner, PartnerMember, User


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
) -> Owner:
    owner = Owner(
        kind=kind,
        legal_name=legal_name,
        contact_email=contact_email,
        billing_currency=billing_currency,
        time_zone=time_zone,
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
def partner_create(*, name: str, contact_email: str) -> Partner:
    partner = Partner(name=name, contact_email=contact_email)
    partner.full_clean()
    partner.save()
    return partner


def partner_member_add(*, user: User, partner: Partner) -> PartnerMember:
    member, _ = PartnerMember.objects.get_or_create(user=user, partner=partner)
    return member

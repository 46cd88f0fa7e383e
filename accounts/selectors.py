"""Reads about people and organisations, always from the point of view of who asks."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.models import Disclosure, DisclosureAcknowledgement, Owner, User


def owners_for_user(*, user: User) -> QuerySet[Owner]:
    """The owner accounts user may act for; operators see all of them."""
    if user.is_staff:
        return Owner.objects.all()
    return Owner.objects.filter(memberships__user=user).distinct()


def disclosure_current() -> Disclosure | None:
    """The newest published disclosure: what statements are issued under now."""
    return Disclosure.objects.filter(published_at__isnull=False).order_by("-published_at").first()


def disclosure_acknowledged(*, user: User, disclosure: Disclosure) -> bool:
    return DisclosureAcknowledgement.objects.filter(user=user, disclosure=disclosure).exists()

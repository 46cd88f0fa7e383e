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


# (version, text SHA-256) → text of published disclosures. A published disclosure can never
# change or be deleted (accounts migration 0003), and its hash is its text's, so what a
# statement cites by version and hash is the same text for as long as the process lives.
_PUBLISHED_TEXTS: dict[tuple[str, str], str] = {}


def disclosure_texts_forget() -> None:
    """Drop the kept texts (tests start each case cold; nothing else needs to)."""
    _PUBLISHED_TEXTS.clear()


def disclosure_texts_published(cited: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The texts of the published disclosures the statements cite (version, SHA-256): read
    once per process, then kept."""
    missing = {version for version, sha in cited if (version, sha) not in _PUBLISHED_TEXTS}
    if missing:
        published = Disclosure.objects.filter(version__in=missing, published_at__isnull=False)
        for version, sha, text in published.values_list("version", "text_sha256", "text"):
            _PUBLISHED_TEXTS[version, sha] = text
    return {pair: _PUBLISHED_TEXTS[pair] for pair in cited if pair in _PUBLISHED_TEXTS}

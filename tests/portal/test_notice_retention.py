"""Notices in the portal's list are kept PORTAL_NOTICE_RETENTION_DAYS after first shown
(issue 20), then ``portal.notices_prune`` deletes them, read or not; nothing younger, and
nothing not yet shown, goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from accounts.models import Owner, User
from portal.models import NoticeKind, PortalNotice
from portal.services.notifications import portal_notices_prune
from portal.tasks import notices_prune

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def notice(user: User, owner: Owner, key: str, shown_days_ago: float, *, read: bool) -> None:
    shown = NOW - timedelta(days=shown_days_ago)
    PortalNotice.objects.create(
        user=user,
        owner=owner,
        kind=NoticeKind.INCIDENT_OPENED,
        key=key,
        title=key,
        link="/incidents/",
        created_at=min(shown, NOW - timedelta(days=400)),
        shown_from=shown,
        read_at=shown if read else None,
    )


@override_settings(PORTAL_NOTICE_RETENTION_DAYS=90)
def test_notices_first_shown_before_the_retention_go_read_or_not(alice, alice_owner):
    notice(alice, alice_owner, "incident:1", 200, read=True)
    notice(alice, alice_owner, "incident:2", 91, read=False)
    notice(alice, alice_owner, "incident:3", 89, read=True)
    notice(alice, alice_owner, "incident:4", -5, read=False)  # an announced maintenance, later
    assert portal_notices_prune(now=NOW) == 2
    kept = set(PortalNotice.objects.values_list("key", flat=True))
    assert kept == {"incident:3", "incident:4"}
    assert portal_notices_prune(now=NOW) == 0


def test_the_default_keeps_a_year(alice, alice_owner):
    notice(alice, alice_owner, "incident:1", 366, read=True)
    notice(alice, alice_owner, "incident:2", 364, read=True)
    assert portal_notices_prune(now=NOW) == 1


def test_the_task_prunes_in_passes(alice, alice_owner, monkeypatch):
    import portal.services.notifications as notifications

    monkeypatch.setattr(notifications, "_PRUNE_BATCH", 2)
    for i in range(5):
        notice(alice, alice_owner, f"incident:{i}", 800, read=True)
    assert notices_prune.apply().get() == 5
    assert not PortalNotice.objects.exists()

"""The user marking notices in the portal's list as read."""

from __future__ import annotations

from datetime import datetime

from accounts.models import User
from portal.access import notice_for_user, notices_for_user


def notice_mark_read(*, user: User, notice_id: int, now: datetime) -> bool:
    """Marks one of the user's notices read (404 for anyone else's); False when it already
    was. Compare-and-set, so a second click keeps the first time."""
    notice = notice_for_user(user=user, notice_id=notice_id, now=now)
    return type(notice).objects.filter(pk=notice.pk, read_at__isnull=True).update(read_at=now) == 1


def notices_mark_all_read(*, user: User, now: datetime) -> int:
    """Marks every notice the user can see now as read; returns how many were unread."""
    return notices_for_user(user=user, now=now).filter(read_at__isnull=True).update(read_at=now)

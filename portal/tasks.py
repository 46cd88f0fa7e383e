"""Celery tasks of the portal: thin, take ids, call one service, own their retries."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from accounts.models import User
from portal.services import notifications
from portal.services.password_reset import password_reset_email_send

_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError, OSError),
    "retry_backoff": True,
    "retry_backoff_max": 300,
    "max_retries": 8,
}


@shared_task(name="portal.password_reset_send", **_RETRY)
def password_reset_send(*, user_id: int, domain: str, use_https: bool) -> None:
    user = User.objects.filter(pk=user_id).first()
    if user is not None:
        password_reset_email_send(user=user, domain=domain, use_https=use_https)


@shared_task(name="portal.notifications_scan", **_RETRY)
def notifications_scan() -> int:
    """Scheduled by beat every minute: finds what to tell, then queues the sending."""
    result = notifications.notifications_scan(now=timezone.now())
    transaction.on_commit(notices_send.delay)
    return result.candidates


@shared_task(name="portal.notices_send", **_RETRY)
def notices_send() -> int:
    return notifications.notices_send(now=timezone.now())


@shared_task(name="portal.notices_prune", **_RETRY)
def notices_prune() -> int:
    """Scheduled by beat every hour: the portal's notices past their retention."""
    return notifications.portal_notices_prune(now=timezone.now())

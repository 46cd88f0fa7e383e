"""Recording logins as sessions a user can see and revoke."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from portal.models import UserSession


def _store(session_key: str | None = None) -> SessionBase:
    engine = import_module(settings.SESSION_ENGINE)
    store: SessionBase = engine.SessionStore(session_key)
    return store


def client_ip(request: HttpRequest) -> str | None:
    """The peer's address as the server saw it (a proxy in front must pass it through)."""
    return request.META.get("REMOTE_ADDR") or None


def session_record(*, request: HttpRequest, user: User) -> UserSession:
    """Called by the login view once the session is authenticated (after its key rotated)."""
    if request.session.session_key is None:
        request.session.save()
    key = request.session.session_key
    if key is None:
        raise RuntimeError("a saved session has a key")
    row, _ = UserSession.objects.update_or_create(
        session_key=key,
        defaults={
            "user": user,
            "ip": client_ip(request),
            "user_agent": request.META.get("HTTP_USER_AGENT", "")[:300],
            "created_at": timezone.now(),
        },
    )
    return row


def sessions_active(*, user: User) -> QuerySet[UserSession]:
    """The user's recorded sessions that still exist and have not expired, newest first."""
    live = Session.objects.filter(expire_date__gt=timezone.now()).values("session_key")
    return UserSession.objects.filter(user=user, session_key__in=live).order_by("-created_at")


@transaction.atomic
def session_revoke(*, session: UserSession, by: User) -> None:
    """Ends the session at once: its Django session is deleted, so its next request is
    anonymous."""
    _store(session.session_key).delete()
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                session.user,
                action="session.revoke",
                before={"ip": session.ip, "created_at": session.created_at.isoformat()},
            )
        ],
        reason="Session revoked by its user.",
    )
    session.delete()


def sessions_revoke_others(*, user: User, keep_key: str | None) -> int:
    others = list(sessions_active(user=user).exclude(session_key=keep_key or ""))
    for session in others:
        session_revoke(session=session, by=user)
    return len(others)


def session_forget(*, session_key: str | None) -> None:
    """Logging out: the session is gone, so is its row."""
    if session_key:
        UserSession.objects.filter(session_key=session_key).delete()

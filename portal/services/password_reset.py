"""Password reset by email: Django's tokens, our wording, sent by a Celery task."""

from __future__ import annotations

from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.template.loader import render_to_string
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import User
from portal.mail import mail_send


def password_reset_queue(*, user: User, domain: str, use_https: bool) -> None:
    """Queues the email once the current transaction commits."""
    from portal.tasks import password_reset_send

    transaction.on_commit(
        lambda: password_reset_send.delay(user_id=user.pk, domain=domain, use_https=use_https)
    )


def password_reset_email_send(*, user: User, domain: str, use_https: bool) -> None:
    """Builds a fresh token for the user and sends the link. Inactive users get nothing."""
    if not user.is_active or not user.has_usable_password():
        return
    context = {
        "user": user,
        "domain": domain,
        "protocol": "https" if use_https else "http",
        "uid": urlsafe_base64_encode(force_bytes(user.pk)),
        "token": default_token_generator.make_token(user),
    }
    subject = render_to_string("portal/email/password_reset_subject.txt", context)
    body = render_to_string("portal/email/password_reset_body.txt", context)
    mail_send(to=user.email, subject=" ".join(subject.split()), body=body)

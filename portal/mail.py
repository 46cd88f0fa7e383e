"""Sending one plain-text email through the configured mailer."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMessage


def mail_send(*, to: str, subject: str, body: str) -> None:
    prefix = getattr(settings, "EMAIL_SUBJECT_PREFIX", "")
    EmailMessage(subject=f"{prefix}{subject}", body=body, to=[to]).send()

"""The unread-notice count in the portal's header: one indexed count per page view."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from portal.access import notices_for_user

register = template.Library()


@register.simple_tag(takes_context=True)
def unread_notices(context: Any) -> int:
    """How many of the requesting user's notices are unread (0 when nobody is logged in)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return 0
    return notices_for_user(user=user, now=timezone.now()).filter(read_at__isnull=True).count()

"""What every owner page shares: who may enter, the clock, and the period picker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django_otp import user_has_device

from accounts.models import User
from accounts.selectors import disclosure_acknowledged, disclosure_current
from portal.selectors import Period, month_period, recent_months
from portal.tables import Table, csv_response, export_of, with_export_links

View = Callable[..., HttpResponseBase]


def owner_view(view: View) -> View:
    """Logged in (else to the login page), and verified by the second factor if the user has
    one: a session from before enrolment on another device is logged out."""

    @wraps(view)
    @never_cache
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        user = request.user
        if not user.is_authenticated or not isinstance(user, User):
            return redirect_to_login(request.get_full_path(), reverse("portal:login"))
        if user_has_device(user) and not getattr(user, "is_verified", lambda: False)():
            logout(request)
            messages.info(request, "Log in again with your authentication code.")
            return redirect_to_login(request.get_full_path(), reverse("portal:login"))
        return view(request, *args, **kwargs)

    return wrapped


def earnings_view(view: View) -> View:
    """An owner page that shows earnings: as ``owner_view``, and the user must first have
    acknowledged the current risk disclosure. A new version asks again; until then the user
    is sent to the disclosure page and brought back here after acknowledging it."""

    @owner_view
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not disclosure_is_acknowledged(the_user(request)):
            return disclosure_redirect(request.get_full_path())
        return view(request, *args, **kwargs)

    return wrapped


def disclosure_redirect(back_to: str) -> HttpResponseBase:
    """To the current risk disclosure, and back to ``back_to`` once it is acknowledged."""
    return redirect(f"{reverse('portal:disclosure')}?{urlencode({'next': back_to})}")


def disclosure_is_acknowledged(user: User) -> bool:
    """Whether user may see earnings: the current disclosure version is acknowledged (with
    no disclosure published at all, nothing can be acknowledged and nothing is shown)."""
    current = disclosure_current()
    return current is not None and disclosure_acknowledged(user=user, disclosure=current)


def the_user(request: HttpRequest) -> User:
    if not isinstance(request.user, User):
        raise TypeError("portal views run behind login: the request has a signed-in user")
    return request.user


def now() -> datetime:
    return timezone.now()


def period_of(request: HttpRequest, at: datetime) -> Period:
    return month_period(now=at, key=request.GET.get("period"))


def period_choices(at: datetime) -> list[tuple[str, str]]:
    return [
        (p.key, f"{p.label} (month to date)" if p.running else p.label)
        for p in recent_months(now=at)
    ]


def table_page(
    request: HttpRequest, template: str, context: dict[str, Any], tables: list[Table]
) -> HttpResponseBase:
    """Renders a page of tables, or one of them as CSV when the request asks for its export."""
    wanted = export_of(request, tables)
    if wanted is not None:
        return csv_response(wanted, stamp=now())
    with_export_links(request, tables)
    return render(request, template, {**context, "tables": {t.name: t for t in tables}})

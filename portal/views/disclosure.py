"""The risk disclosure every owner acknowledges before any earnings figure is shown."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from accounts import services as accounts
from accounts.models import DisclosureAcknowledgement
from accounts.selectors import disclosure_current
from portal.forms import DisclosureAcknowledgementForm
from portal.services.sessions import client_ip
from portal.views.common import owner_view, the_user


def _safe_next(request: HttpRequest) -> str:
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return reverse("portal:home")


@owner_view
def disclosure(request: HttpRequest) -> HttpResponseBase:
    """Shows the current version; a POST acknowledges it, recording time, IP address and
    browser, and returns to the page that asked for it."""
    user = the_user(request)
    current = disclosure_current()
    acknowledgement = (
        DisclosureAcknowledgement.objects.filter(user=user, disclosure=current).first()
        if current is not None
        else None
    )
    form = DisclosureAcknowledgementForm(request.POST or None)
    if (
        request.method == "POST"
        and current is not None
        and acknowledgement is None
        and form.is_valid()
    ):
        accounts.disclosure_acknowledge(
            user=user,
            disclosure=current,
            ip=client_ip(request),
            user_agent=request.META.get("HTTP_USER_AGENT", ""),
        )
        return redirect(_safe_next(request))
    if request.method == "POST" and acknowledgement is not None:
        return redirect(_safe_next(request))
    status = 400 if request.method == "POST" and form.errors else 200
    return render(
        request,
        "portal/disclosure.html",
        {
            "disclosure": current,
            "acknowledgement": acknowledgement,
            "form": form,
            "next": _safe_next(request),
        },
        status=status,
    )

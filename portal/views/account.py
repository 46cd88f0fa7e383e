"""The user's own settings: notification emails, second factor, sessions."""

from __future__ import annotations

from base64 import b32encode

import django_otp
import qrcode
import qrcode.image.svg
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST
from django_otp import user_has_device

from accounts import services as accounts
from portal.forms import CodeForm, NotificationPreferenceForm
from portal.models import UserSession
from portal.services import notifications, sessions, two_factor
from portal.views.common import now, owner_view, the_user


@owner_view
def notification_settings(request: HttpRequest) -> HttpResponse:
    user = the_user(request)
    current = notifications.preferences_for(user=user)
    form = NotificationPreferenceForm(request.POST or None, instance=current)
    if request.method == "POST" and form.is_valid():
        notifications.preferences_save(user=user, now=now(), **form.cleaned_data)
        messages.success(request, "Your notification settings are saved.")
        return redirect("portal:notifications")
    return render(request, "portal/notifications.html", {"form": form})


@owner_view
def security(request: HttpRequest) -> HttpResponse:
    user = the_user(request)
    current_key = request.session.session_key
    listed = [
        {"session": s, "current": s.session_key == current_key}
        for s in sessions.sessions_active(user=user)
    ]
    return render(
        request,
        "portal/security.html",
        {
            "has_2fa": user_has_device(user),
            "sessions": listed,
            "disable_form": CodeForm(),
        },
    )


def _qr_svg(data: str) -> str:
    image = qrcode.make(data, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    svg: str = image.to_string(encoding="unicode")
    return svg


@owner_view
def two_factor_enrol(request: HttpRequest) -> HttpResponse:
    """Shows a new authenticator's QR code; a correct code confirms it and shows the recovery
    codes once."""
    user = the_user(request)
    if user_has_device(user):
        messages.info(request, "Two-factor authentication is already on.")
        return redirect("portal:security")
    device = accounts.totp_enrolment_start(user=user)
    form = CodeForm(request.POST or None)
    form.fields["code"].label = "Code from the app"
    form.fields["code"].help_text = "The six digits the app shows now."
    if request.method == "POST" and form.is_valid():
        try:
            codes = accounts.totp_enrolment_confirm(device=device, token=form.cleaned_data["code"])
        except ValidationError as error:
            form.add_error("code", error.message_dict.get("token", error.messages))
        else:
            django_otp.login(request, device)
            return _show_codes(request, codes, first_time=True)
    uri = device.config_url
    return render(
        request,
        "portal/two_factor_enrol.html",
        {
            "form": form,
            "qr_svg": mark_safe(_qr_svg(uri)),  # noqa: S308 - made by qrcode from our own data
            "otpauth_uri": uri,
            "secret": b32encode(device.bin_key).decode("ascii").rstrip("="),
        },
    )


@owner_view
@require_POST
def two_factor_disable(request: HttpRequest) -> HttpResponse:
    """Turning it off takes a current code (or a recovery code), not just a session."""
    user = the_user(request)
    form = CodeForm(request.POST)
    if form.is_valid() and accounts.otp_device_verify(user=user, token=form.cleaned_data["code"]):
        two_factor.two_factor_disable(user=user)
        messages.success(request, "Two-factor authentication is off.")
    else:
        messages.error(request, "That code is not valid; two-factor authentication stays on.")
    return redirect("portal:security")


@owner_view
@require_POST
def recovery_codes(request: HttpRequest) -> HttpResponse:
    user = the_user(request)
    if not user_has_device(user):
        raise Http404("No second factor to renew codes for.")
    return _show_codes(request, accounts.recovery_codes_regenerate(user=user), first_time=False)


def _show_codes(request: HttpRequest, codes: list[str], *, first_time: bool) -> HttpResponse:
    response = render(
        request, "portal/recovery_codes.html", {"codes": codes, "first_time": first_time}
    )
    response["Cache-Control"] = "no-store"
    return response


@owner_view
@require_POST
def session_revoke(request: HttpRequest, session_id: int) -> HttpResponse:
    user = the_user(request)
    target = UserSession.objects.filter(user=user, pk=session_id).first()
    if target is None:
        raise Http404("No such session.")
    current = target.session_key == request.session.session_key
    sessions.session_revoke(session=target, by=user)
    if current:
        return redirect("portal:login")
    messages.success(request, "That session is ended.")
    return redirect("portal:security")


@owner_view
@require_POST
def sessions_revoke_others(request: HttpRequest) -> HttpResponse:
    user = the_user(request)
    ended = sessions.sessions_revoke_others(user=user, keep_key=request.session.session_key)
    messages.success(request, f"{ended} other session{'s' if ended != 1 else ''} ended.")
    return redirect("portal:security")

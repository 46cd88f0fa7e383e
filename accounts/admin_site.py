"""The operator console: Django's admin site, open only to staff verified by a second factor.

A staff member logs in with email, password and a code from an authenticator app (or a
recovery code). One who has no authenticator yet is sent to enrol one before seeing anything.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import URLPattern, URLResolver, path, reverse
from django_otp import user_has_device

from accounts import admin_views
from accounts.services import otp_device_verify


def is_verified(user: Any) -> bool:
    """True when the session's user passed a second factor (set by django-otp's middleware)."""
    check = getattr(user, "is_verified", None)
    return bool(check is not None and check())


def needs_enrolment(user: Any) -> bool:
    return bool(
        user.is_authenticated and user.is_active and user.is_staff and not user_has_device(user)
    )


class OperatorAuthenticationForm(AdminAuthenticationForm):
    otp_token = forms.CharField(
        label="Authentication code",
        required=False,
        max_length=16,
        help_text="Six digits from your authenticator app, or one of your recovery codes. "
        "Leave empty if you have not set up an authenticator yet.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "text"}),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        user = self.get_user()
        if user is None or not user_has_device(user):
            return cleaned  # first login: the site sends them to enrol an authenticator
        token = (cleaned.get("otp_token") or "").strip()
        if not token:
            raise forms.ValidationError(
                "Enter the code from your authenticator app, or a recovery code.",
                code="otp_required",
            )
        device = otp_device_verify(user=user, token=token)
        if device is None:
            raise forms.ValidationError(
                "That authentication code is not valid (or was already used).",
                code="otp_invalid",
            )
        # django-otp's user_logged_in handler stores this device in the session.
        user.otp_device = device  # type: ignore[attr-defined]
        return cleaned


class StewardAdminSite(AdminSite):
    site_header = "Steward operator console"
    site_title = "Steward"
    index_title = "Fleet, ownership and accounting"
    login_form = OperatorAuthenticationForm
    login_template = "accounts/admin/login.html"

    def __init__(self, name: str = "admin") -> None:
        super().__init__(name)

    def has_permission(self, request: HttpRequest) -> bool:
        return super().has_permission(request) and is_verified(request.user)

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        enrol = HttpResponseRedirect(reverse("admin:otp_enrol", current_app=self.name))
        if request.method == "GET" and needs_enrolment(request.user):
            return enrol
        response = super().login(request, extra_context)
        if (
            request.method == "POST"
            and isinstance(response, HttpResponseRedirect)
            and needs_enrolment(request.user)
        ):
            return enrol
        return response

    def get_urls(self) -> list[URLResolver | URLPattern]:
        own = [
            path("2fa/enrol/", admin_views.enrol, {"site": self}, name="otp_enrol"),
            path(
                "2fa/recovery-codes/",
                self.admin_view(admin_views.recovery_codes),
                {"site": self},
                name="otp_recovery_codes",
            ),
        ]
        # Ours first: the site ends with a catch-all pattern.
        return [*own, *super().get_urls()]

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        context = super().each_context(request)
        context["otp_verified"] = is_verified(request.user)
        return context

"""The operator console: Django's admin site, open only to staff verified by a second factor.

A staff member logs in with email, password and a code from an authenticator app (or a
recovery code). One who has no authenticator yet is sent to enrol one before seeing anything.

Its front page is a dashboard of panels. Accounts is the lowest layer and reads nothing of the
fleet, telemetry or billing, so each app registers its own panel (``dashboard_panel_register``,
from its ``admin`` module, as it registers its models) and fills it through its own selectors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib.admin import AdminSite, ModelAdmin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone
from django_otp import user_has_device

from accounts import admin_views
from accounts.services import otp_device_verify
from core.instants import utc_text


@dataclass(frozen=True)
class DashboardPanel:
    """One panel of the console's front page: ``template`` rendered with what ``context``
    returns for the instant the page is drawn. Shown to operators holding ``permission``."""

    key: str
    order: int
    template: str
    permission: str
    context: Callable[..., dict[str, Any]]  # (*, now: datetime) -> context


_PANELS: dict[str, DashboardPanel] = {}


def dashboard_panel_register(panel: DashboardPanel) -> None:
    """Adds (or replaces, by key: modules may be imported twice) a panel of the front page."""
    _PANELS[panel.key] = panel


def dashboard_panels() -> list[DashboardPanel]:
    return sorted(_PANELS.values(), key=lambda p: (p.order, p.key))


def utc(value: datetime | None, *, seconds: bool = True) -> str:
    """An instant as the console shows it: ``2026-03-01 09:00:00 UTC`` (``—`` for none)."""
    return "—" if value is None else utc_text(value, seconds=seconds)


def _utc_column(model: type[models.Model], name: str) -> Callable[[Any], str]:
    label = getattr(model._meta.get_field(name), "verbose_name", name)

    def column(obj: Any) -> str:
        return utc(getattr(obj, name))

    column.short_description = label  # type: ignore[attr-defined]
    column.admin_order_field = name  # type: ignore[attr-defined]
    column.__name__ = name  # the column's CSS class stays field-<name>
    return column


class UtcColumns[M: models.Model](ModelAdmin[M]):
    """A ``ModelAdmin`` whose instants read ``… UTC``, not a bare local-looking time (the
    console's times are all UTC; Django's format does not say so): in list columns, and in the
    read-only fields of a page (every field of a page the operator may only view). An instant
    the operator may edit stays a form field, whose help text says UTC."""

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        """What an object's change page shows besides its form (its history, its state, the
        steps it allows); a subclass adds to ``super().page_context``. Read once per page."""
        return {}

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if obj is not None:
            context.update(self.page_context(request, obj))
        return super().change_view(request, object_id, form_url, context)

    def _instants(self) -> set[str]:
        return {
            f.name for f in self.model._meta.get_fields() if isinstance(f, models.DateTimeField)
        }

    def _as_utc(self, names: Any) -> list[Any]:
        # One display per name and admin: a page's fields and its read-only fields must name
        # the very same callable.
        made: dict[str, Any] = self.__dict__.setdefault("_utc_displays", {})
        instants = self._instants()
        return [
            made.setdefault(n, _utc_column(self.model, n))
            if isinstance(n, str) and n in instants
            else n
            for n in names
        ]

    def get_list_display(self, request: HttpRequest) -> Any:
        return self._as_utc(super().get_list_display(request))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self._as_utc(super().get_readonly_fields(request, obj))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        view_only = obj is not None and not self.has_change_permission(request, obj)
        shown = set(self.get_readonly_fields(request, obj))

        def swap(field: Any) -> Any:
            if isinstance(field, list | tuple):  # several fields on one line
                return tuple(swap(f) for f in field)
            display = self._as_utc([field])[0]
            return display if view_only or display in shown else field

        return [
            (name, {**options, "fields": [swap(f) for f in options.get("fields", ())]})
            for name, options in fieldsets
        ]


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
    index_title = "Operator dashboard"
    login_form = OperatorAuthenticationForm
    login_template = "accounts/admin/login.html"
    index_template = "admin/console_index.html"

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

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """The dashboard: every registered panel the operator may see, then the app list."""
        now = timezone.now()
        panels = [
            {"template": panel.template, **panel.context(now=now)}
            for panel in dashboard_panels()
            if request.user.has_perm(panel.permission)
        ]
        context = {"dashboard_panels": panels, "dashboard_at": now, **(extra_context or {})}
        return super().index(request, context)

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        context = super().each_context(request)
        context["otp_verified"] = is_verified(request.user)
        return context

"""Forms of the portal: they check shapes; services and selectors do the rest."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import PasswordResetForm

from accounts.models import ApiScope, Partner
from fleet.models import LifecycleState
from portal.models import GPU_DOWN_MINUTES_MAX, GPU_DOWN_MINUTES_MIN, NotificationPreference
from portal.selectors import SORTS
from portal.services.password_reset import password_reset_queue
from telemetry.models import GpuState


class LoginForm(forms.Form):
    # Named "username" as Django's own login form, which password managers know.
    username = forms.EmailField(
        label="Email", widget=forms.EmailInput(attrs={"autocomplete": "username"})
    )
    password = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


class CodeForm(forms.Form):
    code = forms.CharField(
        label="Authentication code",
        max_length=16,
        help_text="Six digits from your authenticator app, or one of your recovery codes.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "text"}),
    )


class QueuedPasswordResetForm(PasswordResetForm):
    """Django's form and token, but the email goes through a Celery task after commit."""

    def save(self, **kwargs: Any) -> None:  # type: ignore[override]
        request = kwargs["request"]
        email = self.cleaned_data["email"]
        for user in self.get_users(email):
            password_reset_queue(
                user=user,
                domain=kwargs.get("domain_override") or request.get_host(),
                use_https=bool(kwargs.get("use_https")) or request.is_secure(),
            )


def _sort_choices() -> list[tuple[str, str]]:
    out = []
    for key in SORTS:
        out.append((key, f"{key.capitalize()}, ascending"))
        out.append((f"-{key}", f"{key.capitalize()}, descending"))
    return out


class GpuFilterForm(forms.Form):
    lifecycle = forms.ChoiceField(
        label="Lifecycle state",
        required=False,
        choices=[("", "Any"), *LifecycleState.choices],
    )
    telemetry = forms.ChoiceField(
        label="Telemetry now", required=False, choices=[("", "Any"), *GpuState.choices]
    )
    cluster = forms.ChoiceField(label="Cluster", required=False)
    model = forms.ChoiceField(label="Model", required=False)
    held = forms.ChoiceField(
        label="Show",
        required=False,
        choices=[("now", "GPUs you hold now"), ("ever", "Also GPUs you held before")],
    )
    sort = forms.ChoiceField(label="Sort by", required=False, choices=_sort_choices())
    period = forms.ChoiceField(label="Period", required=False)

    def __init__(
        self,
        data: Any,
        *,
        clusters: list[str],
        models: list[tuple[str, str]],
        periods: list[tuple[str, str]],
    ) -> None:
        super().__init__(data)
        self.fields["cluster"].choices = [("", "Any"), *((c, c) for c in clusters)]  # type: ignore[attr-defined]
        self.fields["model"].choices = [("", "Any"), *models]  # type: ignore[attr-defined]
        self.fields["period"].choices = periods  # type: ignore[attr-defined]

    def value(self, name: str, default: str = "") -> str:
        """The field's clean value; an invalid field (shown with its error) filters nothing."""
        if self.is_bound:
            self.is_valid()
            return str(self.cleaned_data.get(name) or default)
        return default


class PeriodForm(forms.Form):
    period = forms.ChoiceField(label="Period")

    def __init__(self, data: Any, *, periods: list[tuple[str, str]]) -> None:
        super().__init__(data)
        self.fields["period"].choices = periods  # type: ignore[attr-defined]


class NotificationPreferenceForm(forms.ModelForm[NotificationPreference]):
    gpu_down_after_minutes = forms.IntegerField(
        label="…for longer than (minutes)",
        min_value=GPU_DOWN_MINUTES_MIN,
        max_value=GPU_DOWN_MINUTES_MAX,
        help_text=f"Between {GPU_DOWN_MINUTES_MIN} and {GPU_DOWN_MINUTES_MAX:,} minutes "
        "(seven days).",
    )

    class Meta:
        model = NotificationPreference
        fields = (
            "statement_published",
            "gpu_down",
            "gpu_down_after_minutes",
            "incidents",
            "maintenance",
        )
        labels = {
            "statement_published": "A statement is published",
            "gpu_down": "A GPU is down or its agent is silent…",
            "incidents": "An incident affecting your GPUs is opened or resolved",
            "maintenance": "Maintenance affecting your GPUs is announced",
        }


class DisclosureAcknowledgementForm(forms.Form):
    understood = forms.BooleanField(
        label=(
            "I have read this disclosure and understand that results are not guaranteed "
            "and can be zero."
        ),
        error_messages={"required": "Tick the box to confirm you have read the disclosure."},
    )


def _scope_choices(*, personal: bool) -> list[tuple[str, str]]:
    # Webhook endpoints belong to partners: a personal key has no use for that scope.
    return [
        (value, f"{value} — {label}")
        for value, label in ApiScope.choices
        if not (personal and value == ApiScope.WEBHOOKS_MANAGE)
    ]


class PartnerGrantForm(forms.Form):
    """An owner admin lets a partner, named by its public handle, read within scopes."""

    owner = forms.ChoiceField(label="Owner account")
    handle = forms.SlugField(
        label="Partner handle",
        max_length=50,
        help_text="The partner gives you its handle, for example carol-marketplace.",
    )
    scopes = forms.MultipleChoiceField(
        label="What the partner may read",
        widget=forms.CheckboxSelectMultiple,
        choices=_scope_choices(personal=False),
        error_messages={"required": "Choose at least one scope."},
    )

    def __init__(self, data: Any, *, owners: list[tuple[str, str]]) -> None:
        super().__init__(data)
        self.fields["owner"].choices = owners  # type: ignore[attr-defined]

    def clean_handle(self) -> Partner:
        handle = self.cleaned_data["handle"]
        partner = Partner.objects.filter(handle=handle).first()
        if partner is None:
            raise forms.ValidationError(
                f"No partner has the handle “{handle}”. Check it with them."
            )
        return partner


API_KEY_LIFETIMES = (7, 30, 90, 180, 365)


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=100,
        help_text="What the key is for, so you can tell it apart later.",
    )
    owner = forms.ChoiceField(label="Owner account the key reads")
    scopes = forms.MultipleChoiceField(
        label="What the key may read",
        widget=forms.CheckboxSelectMultiple,
        choices=_scope_choices(personal=True),
        error_messages={"required": "Choose at least one scope."},
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires after",
        coerce=int,
        choices=[(d, f"{d} days") for d in API_KEY_LIFETIMES],
        initial=90,
    )

    def __init__(self, data: Any, *, owners: list[tuple[str, str]]) -> None:
        super().__init__(data)
        self.fields["owner"].choices = owners  # type: ignore[attr-defined]

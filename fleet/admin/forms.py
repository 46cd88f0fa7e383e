"""Forms of the console's actions. They only check input shape; the services check the rules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone

from accounts.models import Owner
from fleet.models import IncidentCause, LifecycleState, Node
from fleet.models.ownership import FULL_SHARE_BPS

_AT_HELP = "UTC, to the second, e.g. 2026-03-01 09:00:00."


def _now() -> datetime:
    return timezone.now().replace(microsecond=0)


class InstantField(forms.DateTimeField):
    """An instant in UTC on a whole second (fractions are refused, not rounded)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", _AT_HELP)
        kwargs.setdefault("initial", _now)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        result = super().clean(value)
        if isinstance(result, datetime) and result.microsecond:
            raise forms.ValidationError("Give a whole second; fractions are not recorded.")
        return result


def _owners() -> Any:
    return Owner.objects.order_by("legal_name")


def _share(label: str = "Share (bps)", *, required: bool = True) -> forms.IntegerField:
    return forms.IntegerField(
        label=label,
        min_value=1,
        max_value=FULL_SHARE_BPS,
        required=required,
        help_text="Basis points: 10000 = the whole GPU (100 %), 2500 = a quarter (25 %).",
    )


class ReasonMixin(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why: kept in the audit trail with the change.",
    )


class SellForm(ReasonMixin):
    owner = forms.ModelChoiceField(queryset=Owner.objects.none(), label="Buyer")
    share_bps = _share()
    at = InstantField(label="Effective at")
    field_order = ("owner", "share_bps", "at", "reason")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = _owners()  # type: ignore[attr-defined]


class TransferForm(ReasonMixin):
    """From one owner to up to three others at one instant (a three-way split included)."""

    from_owner = forms.ModelChoiceField(queryset=Owner.objects.none(), label="From")
    to_owner_1 = forms.ModelChoiceField(queryset=Owner.objects.none(), label="To")
    share_bps_1 = _share()
    to_owner_2 = forms.ModelChoiceField(
        queryset=Owner.objects.none(), label="And to", required=False
    )
    share_bps_2 = _share(required=False)
    to_owner_3 = forms.ModelChoiceField(
        queryset=Owner.objects.none(), label="And to", required=False
    )
    share_bps_3 = _share(required=False)
    at = InstantField(label="Effective at")
    field_order = (
        "from_owner",
        "to_owner_1",
        "share_bps_1",
        "to_owner_2",
        "share_bps_2",
        "to_owner_3",
        "share_bps_3",
        "at",
        "reason",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("from_owner", "to_owner_1", "to_owner_2", "to_owner_3"):
            self.fields[name].queryset = _owners()  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for n in (2, 3):
            owner, share = cleaned.get(f"to_owner_{n}"), cleaned.get(f"share_bps_{n}")
            if (owner is None) != (share is None):
                self.add_error(f"share_bps_{n}", "Give both an owner and a share, or neither.")
        return cleaned

    def recipients(self) -> list[tuple[Owner, int]]:
        return [
            (self.cleaned_data[f"to_owner_{n}"], self.cleaned_data[f"share_bps_{n}"])
            for n in (1, 2, 3)
            if self.cleaned_data.get(f"to_owner_{n}") is not None
        ]


class BuyBackForm(ReasonMixin):
    owner = forms.ModelChoiceField(queryset=Owner.objects.none(), label="From owner")
    share_bps = _share("Share (bps); empty: all of it", required=False)
    at = InstantField(label="Effective at")
    field_order = ("owner", "share_bps", "at", "reason")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = _owners()  # type: ignore[attr-defined]


class MoveForm(forms.Form):
    node = forms.ModelChoiceField(
        queryset=Node.objects.none(),
        required=False,
        help_text="Empty: take the GPU out of its node.",
    )
    slot = forms.IntegerField(min_value=0, required=False, help_text="The NVML index.")
    at = InstantField(label="Effective at")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["node"].queryset = Node.objects.filter(  # type: ignore[attr-defined]
            decommissioned_at__isnull=True
        ).select_related("cluster__site")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("node") is not None and cleaned.get("slot") is None:
            self.add_error("slot", "Give the slot in the node.")
        if cleaned.get("node") is None and not (cleaned.get("reason") or "").strip():
            self.add_error("reason", "Say why the GPU leaves its node.")
        return cleaned


class LifecycleForm(forms.Form):
    state = forms.ChoiceField(choices=LifecycleState.choices)
    at = InstantField(label="Effective at")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class CloseIncidentForm(forms.Form):
    ended_at = InstantField(label="Ended at")
    notes_for_owners = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Empty: keep the current notes.",
    )


class ConfirmDraftForm(forms.Form):
    cause = forms.ChoiceField(
        choices=IncidentCause.choices,
        initial=IncidentCause.HARDWARE,
        help_text="What caused it. Every cause but an owner's request is the operator's.",
    )
    title = forms.CharField(
        max_length=200, required=False, help_text="Empty: keep the draft's title."
    )
    notes_for_owners = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Shown to the owners of the GPU once confirmed.",
    )


class DismissDraftForm(ReasonMixin):
    pass


class CancelMaintenanceForm(ReasonMixin):
    at = InstantField(label="Cancelled at")


class ImportUploadForm(forms.Form):
    file = forms.FileField(help_text="CSV, UTF-8, with a header row.")


class ImportConfirmForm(forms.Form):
    csv_text = forms.CharField(widget=forms.HiddenInput)
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text="Optional: kept in the audit trail (e.g. the delivery note).",
    )


__all__ = [
    "BuyBackForm",
    "CancelMaintenanceForm",
    "CloseIncidentForm",
    "ConfirmDraftForm",
    "DismissDraftForm",
    "ImportConfirmForm",
    "ImportUploadForm",
    "LifecycleForm",
    "MoveForm",
    "SellForm",
    "TransferForm",
]

"""Webhooks in the operator console: endpoints of every partner, their deliveries and
attempts. Changes go through ``webhooks.services``; a secret is shown once, in a message."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from webhooks import guard, services
from webhooks.models import EventType, WebhookAttempt, WebhookDelivery, WebhookEndpoint


def _user(request: HttpRequest) -> Any:
    return request.user if request.user.is_authenticated else None


class EndpointForm(forms.ModelForm[WebhookEndpoint]):
    event_types = forms.MultipleChoiceField(
        choices=EventType.choices, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("partner", "url", "event_types", "description", "enabled")

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        try:
            guard.url_check(url)
        except guard.UnsafeUrl as error:
            raise ValidationError(str(error)) from error
        return url


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin[WebhookEndpoint]):
    form = EndpointForm
    list_display = ("url", "partner", "enabled", "disabled_reason", "last_success_at", "created_at")
    list_select_related = ("partner",)
    list_filter = ("enabled", "partner")
    search_fields = ("url", "description", "partner__name")
    readonly_fields = (
        "disabled_reason",
        "disabled_at",
        "secret_generation",
        "previous_secret_valid_until",
        "last_success_at",
        "created_by",
        "created_at",
        "updated_at",
    )
    actions = ("enable", "disable", "rotate_secret")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return (*self.readonly_fields, *(("partner",) if obj else ()))

    def save_model(
        self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool
    ) -> None:
        data = form.cleaned_data
        if change:
            services.endpoint_update(
                endpoint=obj,
                by=_user(request),
                url=data["url"],
                event_types=data["event_types"],
                description=data["description"],
                enabled=data["enabled"],
            )
            return
        made = services.endpoint_create(
            partner=data["partner"],
            url=data["url"],
            event_types=data["event_types"],
            description=data["description"],
            enabled=data["enabled"],
            by=_user(request),
        )
        obj.pk, obj._state.adding = made.endpoint.pk, False
        self.message_user(
            request,
            f"Secret of {made.endpoint.url} (shown once; give it to the partner): {made.secret}",
            messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: WebhookEndpoint) -> None:
        services.endpoint_delete(endpoint=obj, by=_user(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            services.endpoint_delete(endpoint=endpoint, by=_user(request))

    @admin.action(description="Enable the selected endpoints", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            services.endpoint_update(endpoint=endpoint, by=_user(request), enabled=True)
        self.message_user(request, f"Enabled {len(queryset)} endpoints.", messages.SUCCESS)

    @admin.action(description="Disable the selected endpoints", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            services.endpoint_update(endpoint=endpoint, by=_user(request), enabled=False)
        self.message_user(request, f"Disabled {len(queryset)} endpoints.", messages.SUCCESS)

    @admin.action(description="Rotate the secret of the selected endpoints", permissions=["change"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            made = services.endpoint_rotate_secret(endpoint=endpoint, by=_user(request))
            self.message_user(
                request,
                f"New secret of {endpoint.url} (shown once; the previous one signs too until "
                f"{made.endpoint.previous_secret_valid_until:%Y-%m-%d %H:%M} UTC): {made.secret}",
                messages.WARNING,
            )


class AttemptInline(admin.TabularInline[WebhookAttempt, WebhookDelivery]):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    fields = ("number", "started_at", "duration_ms", "status_code", "error", "response_excerpt")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin[WebhookDelivery]):
    """The delivery log: read-only; replay sends an event again as a new delivery."""

    list_display = (
        "created_at",
        "event_type",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
    )
    list_select_related = ("event", "endpoint")
    list_filter = ("status", "event__type")
    search_fields = ("=id", "=event__id", "endpoint__url")
    raw_id_fields = ("event", "endpoint", "replay_of")
    show_full_result_count = False
    list_per_page = 100
    inlines: ClassVar = [AttemptInline]
    actions = ("replay",)
    readonly_fields = (
        "event",
        "endpoint",
        "status",
        "attempts",
        "first_attempt_at",
        "next_attempt_at",
        "lease_until",
        "last_status_code",
        "last_error",
        "completed_at",
        "replay_of",
        "replayed_by",
        "created_at",
        "payload",
    )
    exclude = ("id",)

    @admin.display(description="event type")
    def event_type(self, obj: WebhookDelivery) -> str:
        return obj.event.type

    @admin.display(description="event data (before filtering by grants)")
    def payload(self, obj: WebhookDelivery) -> str:
        return str(obj.event.data)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("webhooks.change_webhookendpoint")

    @admin.action(description="Replay the selected deliveries", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        done = 0
        for delivery in queryset:
            try:
                services.delivery_replay(delivery=delivery, by=_user(request))
            except ValidationError as error:
                self.message_user(
                    request, f"{delivery}: {' '.join(error.messages)}", messages.ERROR
                )
            else:
                done += 1
        if done:
            self.message_user(request, f"Queued {done} replays.", messages.SUCCESS)

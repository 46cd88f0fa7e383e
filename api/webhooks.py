"""Partner API: webhook endpoints, their deliveries, replay (scope ``webhooks:manage``).

An endpoint belongs to the key's partner; personal keys cannot have endpoints. Another
partner's endpoint or delivery answers 404, like anything else the key may not see. The
``whsec_`` secret appears only in the answers that make it (create, rotate).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import ApiScope, User
from api.access import Caller
from api.views import ApiView
from webhooks import selectors, services
from webhooks.models import EventType, WebhookAttempt, WebhookDelivery, WebhookEndpoint

# --- shapes ---------------------------------------------------------------------------------


class EventTypesField(serializers.ListField):
    """A list of event types whose errors read as sentences, not as a dict by position."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.ChoiceField(choices=EventType.choices), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as error:
            if isinstance(error.detail, dict):
                raise serializers.ValidationError(
                    [
                        f"{message} Choose among {', '.join(EventType.values)}."
                        for messages in error.detail.values()
                        for message in messages
                    ]
                ) from error
            raise


class EndpointSerializer(serializers.ModelSerializer[WebhookEndpoint]):
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=EventType.choices))

    class Meta:
        model = WebhookEndpoint
        fields: tuple[str, ...] = (
            "id",
            "url",
            "event_types",
            "description",
            "enabled",
            "disabled_reason",
            "disabled_at",
            "secret_generation",
            "previous_secret_valid_until",
            "last_success_at",
            "created_at",
            "updated_at",
        )


class EndpointWithSecretSerializer(EndpointSerializer):
    secret = serializers.CharField(
        help_text="whsec_…: shown only in this answer. Verify signatures with it."
    )

    class Meta(EndpointSerializer.Meta):
        fields = (*EndpointSerializer.Meta.fields, "secret")


class _StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields it does not know, so a typo is a 400, not silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class EndpointCreateSerializer(_StrictSerializer):
    url = serializers.CharField(
        max_length=2000, help_text="https:// URL on a public address; redirects are not followed."
    )
    event_types = EventTypesField(min_length=1)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False, default=True)


class EndpointUpdateSerializer(_StrictSerializer):
    url = serializers.CharField(max_length=2000, required=False)
    event_types = EventTypesField(min_length=1, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class AttemptSerializer(serializers.ModelSerializer[WebhookAttempt]):
    class Meta:
        model = WebhookAttempt
        fields = ("number", "started_at", "duration_ms", "status_code", "response_excerpt", "error")


class DeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    event_type = serializers.CharField(source="event.type")
    webhook_id = serializers.CharField(
        source="event.message_id", help_text="The webhook-id header: the same on every attempt."
    )

    class Meta:
        model = WebhookDelivery
        fields: tuple[str, ...] = (
            "id",
            "endpoint_id",
            "event_id",
            "event_type",
            "webhook_id",
            "status",
            "attempts",
            "first_attempt_at",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "completed_at",
            "replay_of_id",
            "created_at",
        )


class DeliveryDetailSerializer(DeliverySerializer):
    attempt_log = AttemptSerializer(many=True, help_text="Every attempt, first first.")

    class Meta(DeliverySerializer.Meta):
        fields = (*DeliverySerializer.Meta.fields, "attempt_log")


class DeliveryFilterSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.choices, required=False)


def _with_secret(made: services.EndpointWithSecret) -> dict[str, Any]:
    """The endpoint and its new secret (``EndpointWithSecretSerializer``'s shape)."""
    return {**EndpointSerializer(made.endpoint).data, "secret": made.secret}


# --- access ---------------------------------------------------------------------------------


class WebhooksManage(BasePermission):
    """A partner's key with ``webhooks:manage``."""

    message = "This API key lacks the scope webhooks:manage."

    def has_permission(self, request: Request, view: Any) -> bool:
        caller: Any = request.user
        if not isinstance(caller, Caller):
            return False
        if ApiScope.WEBHOOKS_MANAGE not in caller.scopes:
            self.message = "This API key lacks the scope webhooks:manage."
            return False
        if caller.key.partner_id is None:
            self.message = (
                "Webhook endpoints belong to partners; use a partner's key with webhooks:manage."
            )
            return False
        return True


class _WebhookView(ApiView):
    permission_classes = (WebhooksManage,)

    @property
    def partner_id(self) -> Any:
        return self.caller.key.partner_id

    @property
    def actor(self) -> User:
        return self.caller.key.created_by

    def endpoint(self) -> WebhookEndpoint:
        return selectors.endpoint_for_partner(
            partner_id=self.partner_id, endpoint_id=self.kwargs["pk"]
        )


# --- views ----------------------------------------------------------------------------------


class EndpointList(_WebhookView, ListAPIView[Any]):
    """Your partner's webhook endpoints."""

    serializer_class = EndpointSerializer
    ordering = ("created_at", "id")
    ordering_fields = ("created_at",)

    def get_queryset(self) -> Any:
        return selectors.endpoints_for_partner(partner_id=self.partner_id)

    @extend_schema(
        request=EndpointCreateSerializer,
        responses={201: EndpointWithSecretSerializer},
        description="Registers an endpoint. The answer carries its secret, shown only once.",
    )
    def post(self, request: Request) -> Response:
        params = EndpointCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        made = services.endpoint_create(
            partner=self.caller.key.partner,  # type: ignore[arg-type]
            by=self.actor,
            **params.validated_data,
        )
        return Response(_with_secret(made), status=201)


class EndpointDetail(_WebhookView):
    serializer_class = EndpointSerializer
    pagination_class = None
    filter_backends = ()

    @extend_schema(responses=EndpointSerializer)
    def get(self, request: Request, pk: Any) -> Response:
        return Response(EndpointSerializer(self.endpoint()).data)

    @extend_schema(request=EndpointUpdateSerializer, responses=EndpointSerializer)
    def patch(self, request: Request, pk: Any) -> Response:
        endpoint = self.endpoint()
        params = EndpointUpdateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        updated = services.endpoint_update(
            endpoint=endpoint, by=self.actor, **params.validated_data
        )
        return Response(EndpointSerializer(updated).data)

    @extend_schema(responses={204: OpenApiResponse(description="Deleted, with its delivery log.")})
    def delete(self, request: Request, pk: Any) -> Response:
        services.endpoint_delete(endpoint=self.endpoint(), by=self.actor)
        return Response(status=204)


class EndpointRotateSecret(_WebhookView):
    serializer_class = EndpointWithSecretSerializer
    pagination_class = None
    filter_backends = ()

    @extend_schema(
        request=None,
        responses=EndpointWithSecretSerializer,
        description="A new secret, shown only in this answer. The previous one keeps signing "
        "(a second signature) until previous_secret_valid_until.",
    )
    def post(self, request: Request, pk: Any) -> Response:
        made = services.endpoint_rotate_secret(endpoint=self.endpoint(), by=self.actor)
        return Response(_with_secret(made))


@extend_schema(parameters=[DeliveryFilterSerializer])
class EndpointDeliveries(_WebhookView, ListAPIView[Any]):
    """The endpoint's deliveries, newest first (each attempt: see the delivery)."""

    serializer_class = DeliverySerializer
    filter_serializer = DeliveryFilterSerializer
    ordering = ("-created_at", "-id")
    ordering_fields = ("created_at",)

    def get_queryset(self) -> Any:
        q = self.query()
        rows = selectors.deliveries_for_endpoint(endpoint=self.endpoint())
        if "status" in q:
            rows = rows.filter(status=q["status"])
        return rows


class DeliveryDetail(_WebhookView):
    serializer_class = DeliveryDetailSerializer
    pagination_class = None
    filter_backends = ()

    @extend_schema(responses=DeliveryDetailSerializer)
    def get(self, request: Request, pk: Any) -> Response:
        delivery = selectors.delivery_for_partner(partner_id=self.partner_id, delivery_id=pk)
        return Response(DeliveryDetailSerializer(delivery).data)


class DeliveryReplay(_WebhookView):
    serializer_class = DeliverySerializer
    pagination_class = None
    filter_backends = ()

    @extend_schema(
        request=None,
        responses={202: DeliverySerializer},
        description="Sends the event to the endpoint again, as a new delivery with the same "
        "webhook-id.",
    )
    def post(self, request: Request, pk: Any) -> Response:
        delivery = selectors.delivery_for_partner(partner_id=self.partner_id, delivery_id=pk)
        replay = services.delivery_replay(delivery=delivery, by=self.actor)
        replay = selectors.delivery_for_partner(partner_id=self.partner_id, delivery_id=replay.pk)
        return Response(DeliverySerializer(replay).data, status=202)

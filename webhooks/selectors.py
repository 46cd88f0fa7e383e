"""Reads of webhook endpoints and deliveries, always through the partner that owns them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from webhooks.models import WebhookDelivery, WebhookEndpoint


def endpoints_for_partner(*, partner_id: Any) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(partner_id=partner_id)


def endpoint_for_partner(*, partner_id: Any, endpoint_id: Any) -> WebhookEndpoint:
    """The partner's endpoint, or 404 (another partner's looks the same as none)."""
    endpoint = endpoints_for_partner(partner_id=partner_id).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise Http404("No such webhook endpoint.")
    return endpoint


def deliveries_for_endpoint(*, endpoint: WebhookEndpoint) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(endpoint=endpoint).select_related("event")


def delivery_for_partner(*, partner_id: Any, delivery_id: Any) -> WebhookDelivery:
    delivery = (
        WebhookDelivery.objects.filter(endpoint__partner_id=partner_id, pk=delivery_id)
        .select_related("event", "endpoint")
        .prefetch_related("attempt_log")
        .first()
    )
    if delivery is None:
        raise Http404("No such webhook delivery.")
    return delivery

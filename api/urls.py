"""The partner API, mounted under /api/v1/ by config.urls."""

from django.conf import settings
from django.urls import path, re_path
from django.views.decorators.csp import csp_override
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from api import views, webhooks

app_name = "api"

urlpatterns = [
    path("owners", views.OwnerList.as_view(), name="owners"),
    path("owners/<uuid:pk>", views.OwnerDetail.as_view(), name="owner"),
    path("gpus", views.GpuList.as_view(), name="gpus"),
    path("gpus/<uuid:pk>", views.GpuDetail.as_view(), name="gpu"),
    path("gpus/<uuid:pk>/ownership", views.GpuOwnership.as_view(), name="gpu-ownership"),
    path("gpus/<uuid:pk>/series", views.GpuSeries.as_view(), name="gpu-series"),
    path("incidents", views.IncidentList.as_view(), name="incidents"),
    path("incidents/<int:pk>", views.IncidentDetail.as_view(), name="incident"),
    path("maintenance", views.MaintenanceList.as_view(), name="maintenance"),
    path("maintenance/<int:pk>", views.MaintenanceDetail.as_view(), name="maintenance-window"),
    path("statements", views.StatementList.as_view(), name="statements"),
    path("statements/<uuid:pk>", views.StatementDetail.as_view(), name="statement"),
    path("statements/<uuid:pk>/csv", views.StatementCsv.as_view(), name="statement-csv"),
    path("statements/<uuid:pk>/pdf", views.StatementPdf.as_view(), name="statement-pdf"),
    path("payouts", views.PayoutList.as_view(), name="payouts"),
    path("webhooks/endpoints", webhooks.EndpointList.as_view(), name="webhook-endpoints"),
    path(
        "webhooks/endpoints/<uuid:pk>", webhooks.EndpointDetail.as_view(), name="webhook-endpoint"
    ),
    path(
        "webhooks/endpoints/<uuid:pk>/rotate-secret",
        webhooks.EndpointRotateSecret.as_view(),
        name="webhook-endpoint-rotate-secret",
    ),
    path(
        "webhooks/endpoints/<uuid:pk>/deliveries",
        webhooks.EndpointDeliveries.as_view(),
        name="webhook-endpoint-deliveries",
    ),
    path(
        "webhooks/deliveries/<uuid:pk>", webhooks.DeliveryDetail.as_view(), name="webhook-delivery"
    ),
    path(
        "webhooks/deliveries/<uuid:pk>/replay",
        webhooks.DeliveryReplay.as_view(),
        name="webhook-delivery-replay",
    ),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path(
        "docs",
        SpectacularSwaggerSplitView.as_view(
            url_name="api:schema", template_name="api/swagger_ui.html"
        ),
        name="docs",
    ),
    path(
        "redoc",
        csp_override(settings.API_REDOC_CSP)(
            SpectacularRedocView.as_view(url_name="api:schema", template_name="api/redoc.html")
        ),
        name="redoc",
    ),
    re_path(r"", views.NoSuchEndpoint.as_view(), name="no-such-endpoint"),
]

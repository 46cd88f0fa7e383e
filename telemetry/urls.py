"""The agent API, mounted under /api/v1/ by config.urls."""

from django.urls import path

from telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("agents/enrol", views.agents_enrol, name="agents-enrol"),
    path("telemetry/batches", views.batches_receive, name="batches"),
]

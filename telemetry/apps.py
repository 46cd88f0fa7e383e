from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Agent ingestion, batches, windows, events, GPU state, availability and rollups."""

    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"

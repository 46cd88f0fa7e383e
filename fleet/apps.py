from django.apps import AppConfig


class FleetConfig(AppConfig):
    """Sites, clusters, nodes, GPUs, dated ownership and placement, maintenance, incidents."""

    name = "fleet"
    default_auto_field = "django.db.models.BigAutoField"

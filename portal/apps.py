from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The owner-facing web pages: thin views over the selectors of the other apps."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Rate cards, revenue, periods, statements, adjustments, payouts, reports."""

    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

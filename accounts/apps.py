from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Users, owners and their members, partners, grants, API keys, disclosures."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

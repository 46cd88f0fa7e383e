"""The admin app configured with Steward's operator console as its default site.

Kept out of ``accounts/apps.py``: Django picks an app's config from the classes in that module,
and an imported ``AdminConfig`` there would be mistaken for the accounts app's own.
"""

from django.contrib.admin.apps import AdminConfig


class StewardAdminConfig(AdminConfig):
    default_site = "accounts.admin_site.StewardAdminSite"

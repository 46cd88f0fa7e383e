from django.contrib import admin
from django.urls import include, path

from config import health

admin.site.site_header = "Steward operator console"
admin.site.site_title = "Steward"
admin.site.index_title = "Fleet, ownership and accounting"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("telemetry.urls")),
    path("", include("portal.urls")),
]

"""The portal's URLs plus one page behind the earnings gate, to test the gate on its own."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from portal.views.common import earnings_view


@earnings_view
def earnings_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("earnings shown")


urlpatterns = [
    path("gated/", earnings_page),
    path("", include("portal.urls")),
]

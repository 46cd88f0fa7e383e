"""No portal page or form answers hostile input with a 5xx (issue 23): NUL bytes, invalid
UTF-8, huge numbers and malformed values in every query parameter a page reads and in the
fields of its forms. A page shows its own error or ignores what it does not understand."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

HOSTILE = ["%00", "a%00b", "%FF%FE", "%C0%AF", "9" * 400, "-1", "1e309", "NaN", "x" * 5000]
PAGES = [
    "/",
    "/gpus/",
    "/incidents/",
    "/maintenance/",
    "/payouts/",
    "/statements/",
    "/notices/",
    "/settings/partners/",
    "/settings/api-keys/",
    "/settings/notifications/",
    "/settings/security/",
]
# What the pages read from the query string (filters, sorting, periods, exports, cursors).
PARAMETERS = ["period", "sort", "held", "export", "page", "state", "q", "cursor", "year", "gpu"]


def test_no_page_errs_on_hostile_query_values(client: Client, world, alice):
    client.force_login(alice)
    failures = []
    for page in PAGES:
        for name in PARAMETERS:
            for value in HOSTILE:
                answer = client.get(f"{page}?{name}={value}")
                if answer.status_code >= 500:
                    failures.append((page, name, value[:12], answer.status_code))
    assert failures == []


@pytest.mark.parametrize(
    "segment", ["%00", "%FF", "9" * 400, "00000000-0000-0000-0000-0000000000%00"]
)
def test_hostile_path_segments_are_not_found(client: Client, world, alice, segment):
    client.force_login(alice)
    for page in ("gpus", "incidents", "maintenance", "statements"):
        answer = client.get(f"/{page}/{segment}/")
        assert answer.status_code == 404, (page, segment, answer.status_code)


@pytest.mark.parametrize("value", ["\x00", "a\x00b", "\udcff", "x" * 100_000])
def test_forms_refuse_hostile_fields_without_an_error(client: Client, world, alice, value):
    anonymous = Client()
    for path, fields in (
        ("/login/", {"username": value, "password": value}),
        ("/password-reset/", {"email": value}),
    ):
        answer = anonymous.post(
            path, {k: v.encode("utf-8", "surrogatepass") for k, v in fields.items()}
        )
        assert answer.status_code < 500, (path, answer.status_code)
    client.force_login(alice)
    for path, fields in (
        ("/settings/api-keys/", {"name": value, "scopes": value, "expires_in_days": value}),
        ("/settings/notifications/", {"email": value, "incident": value, "statement": value}),
        ("/settings/security/2fa/enrol/", {"code": value}),
    ):
        data = {k: v.encode("utf-8", "surrogatepass") for k, v in fields.items()}
        answer = client.post(path, data)
        assert answer.status_code < 500, (path, answer.status_code)

"""Rows equal in the field a client orders by come in id order, in that field's direction, on
every page: the id is the ordering's last key (api.pagination.ApiOrderingFilter)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from api.pagination import ApiOrderingFilter
from api.views import StatementList
from billing.models import Statement
from billing.services.periods import period_for_month
from tests.api.conftest import NOW, client_for

pytestmark = pytest.mark.django_db


def _published_together(world, months: range) -> list[Statement]:
    """Copies of side a's statement for other months, all published at the same instant."""
    copies = []
    for month in months:
        copy = Statement.objects.get(pk=world.a.statement.pk)
        copy.id = None
        copy.period = period_for_month(year=2025, month=month)
        copy.content_sha256 = f"{month:x}" * 64
        copy.status = Statement._meta.get_field("status").default
        copy.published_at = None
        copy.save(force_insert=True)
        copies.append(copy)
    # Published as the fixture publishes: a statement is frozen once published.
    Statement.objects.filter(pk__in=[c.pk for c in copies]).update(
        status=Statement.Status.PUBLISHED, published_at=NOW
    )
    assert world.a.statement.published_at == NOW
    return [world.a.statement, *copies]


@pytest.mark.parametrize(
    ("ordering", "reverse"), [("published_at", False), ("-published_at", True)]
)
def test_statements_published_together_page_in_id_order(world, ordering, reverse):
    made = _published_together(world, range(3, 10))
    client = client_for(world.keys["partner_granted_a"])
    url: str | None = f"/api/v1/statements?ordering={ordering}&limit=3"
    seen: list[str] = []
    with CaptureQueriesContext(connection) as queries:
        while url:
            page = client.get(url)
            assert page.status_code == 200, page.content
            seen += [row["id"] for row in page.json()["results"]]
            url = page.json()["next"]
    assert seen == sorted((str(s.pk) for s in made), reverse=reverse)
    direction = "DESC" if reverse else "ASC"
    listing = [
        q["sql"].rsplit("ORDER BY", 1)[1]
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT "billing_statement"."id"') and "LIMIT" in q["sql"]
    ]
    assert listing and all(f'"billing_statement"."id" {direction}' in o for o in listing)


def test_an_ordering_that_ends_in_the_id_is_kept():
    request = Request(APIRequestFactory().get("/api/v1/statements"))
    ordering = ApiOrderingFilter().get_ordering(request, Statement.objects.none(), StatementList())
    assert ordering == ["-period_start", "id"]

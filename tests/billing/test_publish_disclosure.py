"""A statement is published under the disclosure current when it is approved: a draft
computed under a version since superseded must be recomputed first."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from accounts import services as accounts
from billing.models import Statement
from billing.services.closing import period_close, period_close_run
from billing.services.periods import period_for_month
from billing.services.publishing import statement_publish_approve, statement_publish_request
from tests.billing import scenario as s
from webhooks.models import WebhookEvent

UTC = dt.UTC
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))


@pytest.mark.django_db
def test_approval_under_a_superseded_disclosure_is_refused_until_recomputed(
    oscar, olga, disclosure
):
    s.alice_up_all_month(oscar, *FEB)
    february = period_for_month(year=2026, month=2)
    period_close(period=february, by=oscar)
    requested = statement_publish_request(statement=Statement.objects.get(), by=oscar)
    assert requested.disclosure_version == disclosure.version == "2026-01"
    newer = accounts.disclosure_publish(
        version="2026-11", text=f"{disclosure.text}\n\nPayouts are made in the owner's currency."
    )

    with pytest.raises(ValidationError) as refused:
        statement_publish_approve(statement=requested, by=olga)
    assert refused.value.message_dict == {
        "statement": [
            "This draft was computed under disclosure version 2026-01, but version 2026-11 is "
            "current now; recompute the drafts of the period, then request publishing again."
        ]
    }
    unchanged = Statement.objects.get()
    assert (unchanged.status, unchanged.approved_by, unchanged.published_at) == (
        Statement.Status.PUBLISH_REQUESTED,
        None,
        None,
    )
    assert (unchanged.disclosure_version, unchanged.content_sha256) == (
        "2026-01",
        requested.content_sha256,
    )
    assert not WebhookEvent.objects.exists()

    # Recomputed, the draft cites the current version and publishes under it.
    period_close_run(period=february)
    recomputed = Statement.objects.get()
    assert (recomputed.status, recomputed.disclosure_version) == (Statement.Status.DRAFT, "2026-11")
    assert recomputed.disclosure_sha256 == newer.text_sha256
    statement_publish_request(statement=recomputed, by=oscar)
    published = statement_publish_approve(statement=recomputed, by=olga)
    assert (published.status, published.disclosure_version) == (
        Statement.Status.PUBLISHED,
        "2026-11",
    )

"""A recompute racing the end of the close: every write transaction holds the period and
requires it closing, so no draft is ever left in a closed period."""

import datetime as dt
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, transaction

from billing.models import Period, Statement
from billing.services.closing import period_close_finish, period_close_start, statements_write
from billing.services.computing import statements_compute
from billing.services.periods import period_for_month
from tests.billing import scenario as s

UTC = dt.UTC
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))


def _closing_february(oscar):
    s.alice_up_all_month(oscar, *FEB)
    return period_close_start(period=period_for_month(year=2026, month=2), by=oscar)


@pytest.mark.django_db
def test_drafts_computed_before_the_close_finished_are_not_written_after(oscar, disclosure):
    february = _closing_february(oscar)
    # A run computed its drafts (the long part) while the period was closing...
    drafts = statements_compute(period=february, disclosure=disclosure)
    # ...and meanwhile the close finished: no statement was unpublished.
    period_close_finish(period=february, by=oscar)

    with pytest.raises(ValidationError) as refused:
        statements_write(period=february, drafts=drafts)
    assert refused.value.message_dict == {
        "period": ["February 2026 is closed now, no longer closing; its drafts were not written."]
    }
    assert Period.objects.get(pk=february.pk).status == Period.Status.CLOSED
    assert not Statement.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_finishing_waits_for_a_write_in_progress_then_sees_its_draft(oscar, disclosure):
    february = _closing_february(oscar)
    drafts = statements_compute(period=february, disclosure=disclosure)
    written = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():  # one transaction: the writes on this connection
                statements_write(period=february, drafts=drafts)
                written.set()
                assert release.wait(timeout=30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            written.set()
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert written.wait(timeout=30)
        assert errors == []
        # While the write is open, finishing cannot take the period.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            with pytest.raises(OperationalError, match="lock timeout"):
                period_close_finish(period=february, by=oscar)
    finally:
        release.set()
        thread.join(timeout=30)
    assert errors == []

    # Once it committed, finishing sees its draft and refuses.
    with pytest.raises(ValidationError, match=r"1 statement\(s\) of 2026-02 are not published"):
        period_close_finish(period=february, by=oscar)
    assert Period.objects.get(pk=february.pk).status == Period.Status.CLOSING
    assert list(Statement.objects.values_list("status", flat=True)) == ["draft"]

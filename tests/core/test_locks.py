"""The lock order (issue 21, item 6): written once in ``core.locks``, taken through ``lock``,
checked as locks are taken, and the same in docs/architecture.md."""

from __future__ import annotations

import re
import threading
import tokenize
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection, transaction

from accounts.models import ApiKey, Owner
from billing.models import Period
from core.locks import LOCK_ORDER, LockOrderError, lock, lock_one, lock_shared
from fleet.models import Incident
from tests.conftest import ROOT
from tests.source import string_literals

pytestmark = pytest.mark.django_db

MARCH = datetime(2026, 3, 1, tzinfo=UTC)


def owners(n: int) -> list[Owner]:
    return [Owner.objects.create(legal_name=f"Owner {i:02}") for i in range(n)]


def a_period() -> Period:
    return Period.objects.create(start=MARCH, end=datetime(2026, 4, 1, tzinfo=UTC))


def test_rows_are_locked_in_primary_key_order_and_returned_so():
    made = owners(3)
    with transaction.atomic():
        locked = lock(Owner.objects.filter(pk__in=[o.pk for o in made]).order_by("-legal_name"))
    assert [o.pk for o in locked] == sorted(o.pk for o in made)


def test_a_kind_locked_after_a_later_one_in_one_transaction_is_refused():
    (owner,) = owners(1)
    a_period()
    with transaction.atomic():
        assert lock(Incident.objects.all()) == []  # nothing locked: nothing recorded
        lock(Owner.objects.filter(pk=owner.pk))
    refused = r"billing\.period locked after accounts\.owner"
    with pytest.raises(LockOrderError, match=refused), transaction.atomic():
        lock(Owner.objects.filter(pk=owner.pk))
        lock(Period.objects.all())


def test_the_order_holds_per_service_transaction_not_per_test():
    """Two service calls in turn (each its own transaction in production) may lock in any
    order between them; the test's own transaction around both does not count."""
    (owner,) = owners(1)
    a_period()
    with transaction.atomic():
        lock(Owner.objects.filter(pk=owner.pk))
    with transaction.atomic():
        lock(Period.objects.all())
        lock(Owner.objects.filter(pk=owner.pk))  # the right order within one
        with transaction.atomic():  # a nested block is the same service transaction
            lock(Owner.objects.filter(pk=owner.pk))


def test_rows_already_held_may_be_locked_again_but_no_others():
    """A close's chunks, inside one operator action's transaction, each hold the period the
    first one holds: that waits for no one. Another period, or the same one more strongly
    than it is held, could wait, and stays refused."""
    (owner,) = owners(1)
    march = a_period()
    april = Period.objects.create(start=march.end, end=datetime(2026, 5, 1, tzinfo=UTC))
    with transaction.atomic():
        lock_shared(Period.objects.filter(pk=march.pk), "status")
        lock(Owner.objects.filter(pk=owner.pk))
        assert lock_shared(Period.objects.filter(pk=march.pk), "status") == [("open",)]
    refused = r"billing\.period locked after accounts\.owner"
    with pytest.raises(LockOrderError, match=refused), transaction.atomic():
        lock_shared(Period.objects.filter(pk=march.pk), "status")
        lock(Owner.objects.filter(pk=owner.pk))
        lock_shared(Period.objects.filter(pk__in=[march.pk, april.pk]), "status")
    with pytest.raises(LockOrderError, match=refused), transaction.atomic():
        lock_shared(Period.objects.filter(pk=march.pk), "status")
        lock(Owner.objects.filter(pk=owner.pk))
        lock(Period.objects.filter(pk=march.pk))  # FOR UPDATE of a row held FOR SHARE
    with transaction.atomic():
        lock(Period.objects.filter(pk=march.pk))
        lock(Owner.objects.filter(pk=owner.pk))
        lock_shared(Period.objects.filter(pk=march.pk), "status")  # weaker than held


def test_a_kind_without_a_place_in_the_order_is_refused():
    unplaced = r"accounts\.apikey has no place"
    with pytest.raises(LockOrderError, match=unplaced), transaction.atomic():
        lock(ApiKey.objects.all())


def test_lock_one_says_when_there_is_nothing_to_lock():
    with pytest.raises(Owner.DoesNotExist), transaction.atomic():
        lock_one(Owner.objects.filter(legal_name="No such owner"))


@pytest.mark.django_db(transaction=True)
def test_a_locked_row_makes_a_second_transaction_wait():
    (owner,) = owners(1)
    held, waited = threading.Event(), []

    def second() -> None:
        held.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            try:
                lock(Owner.objects.filter(pk=owner.pk))
            except Exception as error:  # the lock timeout is what is asserted
                waited.append(type(error).__name__)
        connection.close()

    thread = threading.Thread(target=second)
    thread.start()
    with transaction.atomic():
        lock(Owner.objects.filter(pk=owner.pk))
        held.set()
        thread.join(10)
    assert waited == ["OperationalError"]


# Where locks are taken: ``select_for_update`` and SQL ``FOR UPDATE``/``FOR SHARE`` outside
# core/locks.py only for SKIP LOCKED claims (which never wait, see core/locks.py).
_APPS = ["accounts", "webhooks", "fleet", "telemetry", "billing", "portal", "api", "config"]


def _row_locks(path: Path) -> list[int]:
    """Lines of ``path`` that take a row lock other than by ``core.locks``."""
    found = []
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            named = token.type == tokenize.NAME and token.string == "select_for_update"
            if named and "skip_locked=True" not in token.line:
                found.append(token.start[0])
    for line, text in string_literals(path):
        sql = re.search(r"\bFOR (UPDATE|SHARE)\b", text) and "SELECT " in text
        if sql and "SKIP LOCKED" not in text:
            found.append(line)
    return found


def test_services_take_row_locks_only_through_the_helper():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for app in _APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        for line in _row_locks(path)
    ]
    assert offenders == []


def test_the_architecture_doc_gives_the_same_order():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Lock order", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z_]+\.[a-z_]+)`", section)
    assert [n for n in named if n in LOCK_ORDER] == list(LOCK_ORDER)


def test_root_is_the_repository():
    assert isinstance(ROOT, Path) and (ROOT / "core" / "locks.py").exists()

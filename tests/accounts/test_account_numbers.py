"""Owners' account numbers: given by the database to every owner, new and existing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from accounts.models import Owner
from tests.billing import scenario as s


@pytest.mark.django_db
def test_every_new_owner_gets_the_next_number_at_once():
    alice = s.owner("Alice Compute Ltd")
    bob = s.owner("Bob Hosting Ltd")
    # Returned by the INSERT itself: no reload needed.
    assert alice.account_number >= 100001
    assert bob.account_number == alice.account_number + 1
    assert Owner.objects.get(pk=bob.pk).account_number == bob.account_number
    with pytest.raises(IntegrityError), transaction.atomic():
        Owner.objects.filter(pk=bob.pk).update(account_number=alice.account_number)


@pytest.mark.django_db(transaction=True)
def test_the_migration_numbers_existing_owners_in_the_order_they_were_created():
    before = [("accounts", "0005_partner_handle")]
    after = [("accounts", "0006_owner_account_number_and_address")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("accounts", "Owner")
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for name, day in (("Second", 2), ("First", 1), ("Third", 3)):
        old.objects.create(
            kind="company",
            legal_name=name,
            contact_email=f"{name.lower()}@owner.example",
            created_at=base + dt.timedelta(days=day),
        )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    numbers = dict(Owner.objects.values_list("legal_name", "account_number"))
    assert numbers == {"First": 100001, "Second": 100002, "Third": 100003}
    assert s.owner("Fourth Ltd").account_number == 100004  # the sequence goes on from there

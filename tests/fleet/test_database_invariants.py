"""The invariants hold in PostgreSQL itself: raw SQL that breaks them fails."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from accounts.models import AuditEntry
from accounts.services import AuditEvent, audit_log
from fleet.models import Ownership, Placement
from tests.fleet.conftest import T

INSERT = (
    "INSERT INTO fleet_ownership (gpu_id, owner_id, share_bps, valid_from, valid_to, reason,"
    " created_at) VALUES (%s, %s, %s, %s, %s, 'raw', now()) RETURNING id"
)


def insert(gpu, owner, bps, start, end=None) -> int:
    with connection.cursor() as cursor:
        cursor.execute(INSERT, [gpu.pk, owner.pk, bps, start, end])
        return int(cursor.fetchone()[0])


def check_now() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@pytest.mark.django_db(transaction=True)
def test_over_allocation_by_raw_sql_fails_at_commit(gpu, alice_owner, bob_owner):
    insert(gpu, alice_owner, 6000, T(1))  # autocommit: this one is in
    with (
        pytest.raises(IntegrityError, match=r"would add up to 10500 bps at 2026-03-05T00:00:00Z"),
        transaction.atomic(),
    ):
        insert(gpu, bob_owner, 4500, T(5))
    assert list(Ownership.objects.values_list("share_bps", flat=True)) == [6000]


@pytest.mark.django_db(transaction=True)
def test_raw_sql_transfer_that_closes_then_opens_commits(gpu, alice_owner, bob_owner):
    first = insert(gpu, alice_owner, 10000, T(1))
    with transaction.atomic(), connection.cursor() as cursor:
        # Opened before the close: over-allocated for a moment, fine by commit (deferred).
        insert(gpu, bob_owner, 10000, T(5))
        cursor.execute("UPDATE fleet_ownership SET valid_to = %s WHERE id = %s", [T(5), first])
    assert Ownership.objects.count() == 2


@pytest.mark.django_db
def test_over_allocation_in_the_future_only_is_caught(gpu, alice_owner, bob_owner):
    insert(gpu, alice_owner, 5000, T(1), T(10))
    insert(gpu, bob_owner, 5000, T(1))
    insert(gpu, alice_owner, 5001, T(20))  # overlaps bob's open-ended row
    with pytest.raises(IntegrityError, match="10001 bps at 2026-03-20T00:00:00Z"):
        check_now()


@pytest.mark.django_db
def test_one_owner_cannot_hold_two_overlapping_rows(gpu, alice_owner):
    insert(gpu, alice_owner, 1000, T(1), T(10))
    with pytest.raises(IntegrityError, match="fleet_ownership_owner_no_overlap"):
        insert(gpu, alice_owner, 1000, T(9))


@pytest.mark.django_db
def test_adjacent_rows_of_one_owner_do_not_overlap(gpu, alice_owner):
    insert(gpu, alice_owner, 1000, T(1), T(10))
    insert(gpu, alice_owner, 2000, T(10))
    check_now()
    assert Ownership.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE fleet_ownership SET share_bps = 10 WHERE id = %s",
        "UPDATE fleet_ownership SET valid_from = '2026-01-01' WHERE id = %s",
        "UPDATE fleet_ownership SET reason = 'rewritten' WHERE id = %s",
    ],
)
def test_ownership_rows_are_not_edited_in_place(gpu, alice_owner, statement):
    row = insert(gpu, alice_owner, 1000, T(1))
    with pytest.raises(IntegrityError, match="cannot be edited"), connection.cursor() as cursor:
        cursor.execute(statement, [row])


@pytest.mark.django_db
def test_a_closed_ownership_row_stays_closed(gpu, alice_owner):
    row = insert(gpu, alice_owner, 1000, T(1), T(5))
    with pytest.raises(IntegrityError, match="cannot be edited"), connection.cursor() as cursor:
        cursor.execute("UPDATE fleet_ownership SET valid_to = NULL WHERE id = %s", [row])


@pytest.mark.django_db
def test_ownership_rows_cannot_be_deleted(gpu, alice_owner):
    row = insert(gpu, alice_owner, 1000, T(1))
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("DELETE FROM fleet_ownership WHERE id = %s", [row])


@pytest.mark.django_db
@pytest.mark.parametrize("bps", [0, 10001])
def test_share_range_is_checked(gpu, alice_owner, bps):
    with pytest.raises(IntegrityError, match="fleet_ownership_share_range"):
        insert(gpu, alice_owner, bps, T(1))


@pytest.mark.django_db
def test_placements_do_not_overlap_per_gpu_or_per_slot(gpu, gpu2, node, node2):
    Placement.objects.create(gpu=gpu, node=node, slot=0, valid_from=T(1))
    with (
        pytest.raises(IntegrityError, match="fleet_placement_gpu_no_overlap"),
        transaction.atomic(),
    ):
        Placement.objects.create(gpu=gpu, node=node2, slot=0, valid_from=T(2))
    with (
        pytest.raises(IntegrityError, match="fleet_placement_slot_no_overlap"),
        transaction.atomic(),
    ):
        Placement.objects.create(gpu=gpu2, node=node, slot=0, valid_from=T(2))


@pytest.mark.django_db
def test_placements_only_close_once_and_are_never_deleted(gpu, node):
    p = Placement.objects.create(gpu=gpu, node=node, slot=0, valid_from=T(1))
    Placement.objects.filter(pk=p.pk).update(valid_to=T(2))
    with pytest.raises(IntegrityError, match="cannot be edited"), transaction.atomic():
        Placement.objects.filter(pk=p.pk).update(valid_to=T(3))
    with pytest.raises(IntegrityError, match="cannot be edited"), transaction.atomic():
        Placement.objects.filter(pk=p.pk).update(slot=3)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        Placement.objects.filter(pk=p.pk).delete()


@pytest.mark.django_db
def test_lifecycle_transitions_are_immutable(gpu):
    transition = gpu.lifecycle.get()
    with pytest.raises(IntegrityError, match="cannot be changed"), transaction.atomic():
        type(transition).objects.filter(pk=transition.pk).update(reason="rewritten")
    with pytest.raises(IntegrityError, match="cannot be deleted"), transaction.atomic():
        type(transition).objects.filter(pk=transition.pk).delete()


@pytest.mark.django_db
def test_audit_entries_cannot_be_changed_or_deleted(gpu, oscar):
    (entry,) = audit_log(actor=oscar, events=[AuditEvent.of(gpu, action="test")], reason="r")
    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE accounts_auditentry SET reason = 'x' WHERE id = %s", [entry.pk])
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).delete()

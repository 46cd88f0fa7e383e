"""Derived passes one at a time per shard of the GPUs (``derived.SHARDS``): a pass takes a
free shard that has marks, passes of different shards run side by side, and a rebuild still
runs alone."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection

from telemetry.models import HourlyRollup
from telemetry.services.derived import PASS_LOCK, SHARDS, derived_drain, derived_process
from telemetry.services.processing import batches_process
from telemetry.testing import fleet_node, window
from tests.telemetry.test_derived import T0, at, marks, send, side_connection


def shard_of(gpu_id: uuid.UUID) -> int:
    """A GPU's shard, as docs/telemetry.md states it: the last byte of its id, modulo SHARDS."""
    return gpu_id.bytes[15] % SHARDS


pytestmark = [
    pytest.mark.usefixtures("now", "no_queued_passes"),
    pytest.mark.django_db(transaction=True),
]


def test_a_gpus_shard_is_the_one_the_claim_computes(db):
    ids = [uuid.uuid4() for _ in range(64)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT mod(get_byte(uuid_send(g), 15), %s) FROM unnest(%s::uuid[]) AS g",
            [SHARDS, ids],
        )
        assert [row[0] for row in cursor.fetchall()] == [shard_of(g) for g in ids]
    assert {shard_of(g) for g in ids} == set(range(SHARDS))


def _gpus_in_two_shards(post):
    """Two placed GPUs in different shards, each with a window marked."""
    node = fleet_node(gpus=SHARDS * 4, placed_from=T0 - dt.timedelta(days=3))
    by_shard = {shard_of(g.id): g for g in node.gpus}
    assert len(by_shard) >= 2, "16 random ids fell in one shard"
    first, second = list(by_shard.values())[:2]
    send(post, node, [window(first.nvml_uuid, at(0)), window(second.nvml_uuid, at(0))])
    batches_process(worker="w")
    return node, first, second


def test_a_pass_takes_another_shard_while_one_is_held(post):
    _, first, second = _gpus_in_two_shards(post)
    with side_connection() as other:
        # A pass of the first GPU's shard in flight.
        other.execute("SELECT pg_advisory_xact_lock_shared(%s)", [PASS_LOCK])
        other.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK + 1 + shard_of(first.id)])
        result = derived_process(limit=100)
        assert (result.busy, result.claimed) == (False, 1)
        assert marks() == [(first.id, T0)]
        assert derived_drain(limit=100).claimed == 0  # the other shard's mark waits for it
        other.rollback()
    assert derived_drain(limit=100).claimed == 1
    assert marks() == []
    assert sorted(r.gpu_id for r in HourlyRollup.objects.all()) == sorted([first.id, second.id])


def test_a_pass_is_busy_when_every_shard_is_held_or_a_rebuild_runs(post):
    _gpus_in_two_shards(post)
    with side_connection() as other:
        for shard in range(SHARDS):
            other.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK + 1 + shard])
        assert derived_process(limit=100).busy
        other.rollback()
        other.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK])  # as rollups_rebuild
        assert derived_process(limit=100).busy
        other.rollback()
    assert derived_drain(limit=100).claimed == 2


def test_a_sharing_pass_leaves_a_large_backlog_shard_by_shard(post, monkeypatch):
    """The Celery task's passes stop taking shards once they hold ``ONE_SHARD_FROM`` marks:
    another process's pass takes the next shard beside them. ``derived_drain``'s do not."""
    from telemetry.services import derived

    node, first, second = _gpus_in_two_shards(post)
    monkeypatch.setattr(derived, "ONE_SHARD_FROM", 1)
    assert derived_process(limit=100, share=True).claimed == 1
    assert len(marks()) == 1
    assert derived_process(limit=100, share=True).claimed == 1
    assert marks() == []
    send(post, node, [window(first.nvml_uuid, at(1)), window(second.nvml_uuid, at(1))])
    batches_process(worker="w")
    assert derived_process(limit=100).claimed == 2  # not sharing: every shard in one pass

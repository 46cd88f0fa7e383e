"""The series' fast path (buckets summed straight from the rollups, and rendered straight to
text) against the reference (every bucket measured from the engine's cells, rendered by the
serializer's rules): random GPUs with telemetry gaps, state changes and counter resets,
holdings sold mid-hour or on the hour, maintenance and incidents at odd instants, time out of
service. Every point must be identical, field by field, and the JSON byte for byte."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from api.selectors import PlainBucket, SeriesPoint, plain_point, series_parts
from api.serializers import SeriesPointSerializer, row_sources, rows_data, series_points_json
from fleet.models import (
    Incident,
    IncidentCause,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
    Ownership,
)
from tests.billing import scenario as s


def series_points(parts: list[PlainBucket | SeriesPoint]) -> list[SeriesPoint]:
    """``series_parts``' buckets all as points (a plain one through ``plain_point``)."""
    return [plain_point(p) if isinstance(p, PlainBucket) else p for p in parts]


pytestmark = pytest.mark.django_db

UTC = dt.UTC
START = dt.datetime(2026, 3, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
# Which path each comparison's queries took (see the last random test).
TAKEN: dict[str, int] = {"fast": 0, "cells": 0}


def _instant(rng: random.Random, hours: int, *, on_the_hour: bool) -> dt.datetime:
    at = START + dt.timedelta(hours=rng.randrange(hours))
    return at if on_the_hour else at + dt.timedelta(minutes=rng.randrange(1, 60))


def _scenario(rng: random.Random, hours: int, alice_owner, bob_owner):
    f = s.fleet(f"r{rng.randrange(10**6)}")
    gpu = s.gpu(f, f"SN-R{rng.randrange(10**6)}", slot=0)
    states = ["up", "up", "up", "degraded", "down"]

    def change(t: dt.datetime, minute: s.Minute) -> s.Minute:
        hour = int((t - START) // HOUR)
        minute["state"] = states[(hour * 7 + rng.randrange(3)) % len(states)]
        minute["util"] = None if rng.random() < 0.02 else round(rng.uniform(0, 100), 2)
        if rng.random() < 0.002:
            minute["energy_mj"] = rng.randrange(10**6)  # a counter reset
        return minute

    gaps = [
        (a, a + dt.timedelta(minutes=rng.randrange(30, 240)))
        for a in (_instant(rng, hours, on_the_hour=rng.random() < 0.5) for _ in range(3))
    ]
    s.windows(gpu, START - HOUR, START + hours * HOUR, node=f.node, skip=gaps, change=change)
    s.rebuild(START, START + hours * HOUR)

    sold = _instant(rng, hours, on_the_hour=rng.random() < 0.5)
    s.own(gpu, alice_owner, 10_000, s.EPOCH, sold)
    back = sold + dt.timedelta(hours=rng.randrange(1, 12), minutes=rng.choice([0, 0, 17]))
    Ownership.objects.create(
        gpu=gpu, owner=bob_owner, share_bps=4_000, valid_from=sold, valid_to=back, reason="t"
    )
    Ownership.objects.create(
        gpu=gpu, owner=alice_owner, share_bps=6_000, valid_from=sold, reason="t"
    )
    if rng.random() < 0.8:
        starts = _instant(rng, hours, on_the_hour=rng.random() < 0.5)
        MaintenanceWindow.objects.create(
            gpu=gpu,
            title="m",
            announced_at=starts - dt.timedelta(days=3),
            starts_at=starts,
            ends_at=starts + dt.timedelta(minutes=rng.randrange(20, 300)),
        )
    if rng.random() < 0.8:
        began = _instant(rng, hours, on_the_hour=rng.random() < 0.5)
        Incident.objects.create(
            gpu=gpu,
            title="i",
            cause=rng.choice([IncidentCause.POWER, IncidentCause.OWNER_REQUESTED]),
            started_at=began,
            ended_at=began + dt.timedelta(minutes=rng.randrange(5, 400)),
        )
    if rng.random() < 0.5:
        out = _instant(rng, hours, on_the_hour=rng.random() < 0.5)
        LifecycleTransition.objects.create(gpu=gpu, state=LifecycleState.MAINTENANCE, at=out)
        LifecycleTransition.objects.create(
            gpu=gpu,
            state=LifecycleState.IN_SERVICE,
            at=out + dt.timedelta(minutes=rng.randrange(30, 300)),
        )
    return gpu


def _cells_read(sql: str) -> bool:
    """Whether the engine's cells were summed: through the temp table, or (a few cells) from
    the same columns as array parameters."""
    return "billing_usage_cell" in sql or "AS u(idx, gpu_id" in sql


def _rendered(points) -> bytes:
    sources = row_sources(SeriesPointSerializer)
    rows = [[getattr(p, source) for source in sources] for p in points]
    return JSONRenderer().render(rows_data(SeriesPointSerializer, rows))


def _both(gpu, owner_ids, end, step):
    with CaptureQueriesContext(connection) as queries:
        parts = series_parts(gpu=gpu, owner_ids=owner_ids, start=START, end=end, step=step)
    sql = " ".join(q["sql"] for q in queries)
    TAKEN["fast"] += "date_bin" in sql
    TAKEN["cells"] += _cells_read(sql)
    reference = series_points(
        series_parts(gpu=gpu, owner_ids=owner_ids, start=START, end=end, step=step, fast=False)
    )
    assert series_points_json(parts) == _rendered(reference), (owner_ids, step)
    return series_points(parts), reference


def _compare(seed: int, alice_owner, bob_owner) -> None:
    rng = random.Random(seed)
    hours = 48 if seed % 3 else 72
    gpu = _scenario(rng, hours, alice_owner, bob_owner)
    for owner_ids in ([alice_owner.pk], [bob_owner.pk], [alice_owner.pk, bob_owner.pk]):
        for step in ("hour", "day"):
            end = START + hours * HOUR
            fast, reference = _both(gpu, owner_ids, end, step)
            assert len(fast) == (hours if step == "hour" else hours // 24)
            for a, b in zip(fast, reference, strict=True):
                assert a == b, (seed, owner_ids, step, a, b)


@pytest.mark.parametrize("seed", range(10))
def test_the_fast_path_gives_the_reference_points(seed, alice_owner, bob_owner):
    _compare(seed, alice_owner, bob_owner)


def test_both_paths_serve_the_random_scenarios(alice_owner, bob_owner):
    """The comparison above is not vacuous: over the first seeds, some buckets came from the
    rollups and some from the engine's cells."""
    TAKEN.update(fast=0, cells=0)
    for seed in range(3):
        _compare(seed, alice_owner, bob_owner)
    assert TAKEN["fast"] > 0
    assert TAKEN["cells"] > 0


def test_a_quiet_month_needs_no_cells(world):
    """Held, in service, no maintenance or incident: every bucket from the rollups, and the
    figures are the telemetry's (one hour of windows, two half hours of gaps)."""
    gpu = world.a.gpu
    s.windows(gpu, START, START + dt.timedelta(hours=1, minutes=30), node=world.a.node)
    s.rebuild(START, START + 3 * HOUR)
    with CaptureQueriesContext(connection) as queries:
        parts = series_parts(
            gpu=gpu, owner_ids=[world.a.owner.pk], start=START, end=START + 3 * HOUR, step="hour"
        )
    points = series_points(parts)
    sql = " ".join(q["sql"] for q in queries)
    assert "date_bin" in sql and not _cells_read(sql)
    assert [(p.up_s, p.no_data_s) for p in points] == [(3600, 0), (1800, 1800), (0, 3600)]
    # The whole range is one plain gap (series_parts' shortcut): the same as the reference.
    for end, step in (
        (START + 3 * HOUR, "hour"),
        (START + 48 * HOUR, "hour"),
        (START + 48 * HOUR, "day"),
    ):
        fast, reference = _both(gpu, [world.a.owner.pk], end, step)
        assert fast == reference

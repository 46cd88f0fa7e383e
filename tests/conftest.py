"""Shared fixtures: the actors of every story, and a real Celery worker.

oscar operates; alice (Alice Compute Ltd) and bob (Bob Chen) own GPUs; carol is a partner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings

from accounts import services as accounts
from accounts.models import Membership, Owner, Partner, User

PASSWORD = "correct-horse-battery-staple"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def oscar(db: None) -> User:
    return accounts.user_create(
        email="oscar@steward.example",
        password=PASSWORD,
        full_name="Oscar",
        is_staff=True,
        is_superuser=True,
    )


@pytest.fixture
def alice_owner(db: None) -> Owner:
    return accounts.owner_create(
        kind=Owner.Kind.COMPANY,
        legal_name="Alice Compute Ltd",
        contact_email="billing@alice.example",
        billing_currency="EUR",
        time_zone="Europe/Berlin",
    )


@pytest.fixture
def bob_owner(db: None) -> Owner:
    return accounts.owner_create(
        kind=Owner.Kind.PERSON,
        legal_name="Bob Chen",
        contact_email="bob@owner.example",
    )


@pytest.fixture
def alice(alice_owner: Owner) -> User:
    user = accounts.user_create(email="alice@owner.example", password=PASSWORD, full_name="Alice")
    accounts.membership_grant(user=user, owner=alice_owner, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def bob(bob_owner: Owner) -> User:
    user = accounts.user_create(email="bob@owner.example", password=PASSWORD, full_name="Bob")
    accounts.membership_grant(user=user, owner=bob_owner, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def carol_partner(db: None) -> Partner:
    return accounts.partner_create(name="Carol Marketplace", contact_email="api@partner.example")


@pytest.fixture
def carol(carol_partner: Partner) -> User:
    user = accounts.user_create(email="carol@partner.example", password=PASSWORD)
    accounts.partner_member_add(user=user, partner=carol_partner)
    return user


def database_url(db: dict[str, Any]) -> str:
    """A DATABASE_URL for a Django DATABASES entry (the test database, once created)."""
    auth = quote(db["USER"] or "")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"])
    host = db["HOST"] or ""
    if host.startswith("/"):  # a socket directory
        return f"postgresql://{auth}@/{db['NAME']}?host={quote(host)}"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{auth}@{host}{port}/{db['NAME']}"


@dataclass
class Worker:
    queue: str
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="session", autouse=True)
def _ingest_side_connection_closed(django_db_setup: None) -> Iterator[None]:
    """The ingest worker code keeps a second connection per process; close it before
    pytest-django drops the test database, which refuses while a session is open."""
    yield
    from telemetry.services.processing import side_connection_close

    side_connection_close()


def celery_worker_start(
    queue: str,
    *,
    loglevel: str = "WARNING",
    stdout: Any = None,
    stderr: Any = None,
    quiet: bool = False,
) -> subprocess.Popen[bytes]:
    """A real `celery worker` process (solo pool) on the real broker and the test database,
    taking ``queue``, once it answers a ping. ``stdout``/``stderr``: where its output goes
    (inherited unless given, e.g. an open file); ``quiet`` leaves out its start-up banner."""
    from config.celery import ping

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "CELERY_DEFAULT_QUEUE": queue,
        "PYTHONWARNINGS": "ignore",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            *(["--quiet"] if quiet else []),
            "worker",
            "--pool=solo",
            f"--queues={queue}",
            f"--hostname=test-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--loglevel={loglevel}",
        ],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=stderr,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"celery worker exited with {process.returncode}")
            try:
                ping.apply_async(queue=queue, ignore_result=False).get(timeout=5)
                return process
            except Exception:
                if time.monotonic() > deadline:
                    raise
    except BaseException:
        process.kill()
        process.wait()
        raise


def celery_worker_stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup: None) -> Iterator[Worker]:
    """A real `celery worker` process on the real broker, using the test database.

    Tests that use it need `transactional_db`, so what they write is committed and visible.
    """
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    kick_flags_clear()
    process = celery_worker_start(queue)
    try:
        _session_worker.append(Worker(queue=queue, process=process))
        yield _session_worker[0]
    finally:
        _session_worker.clear()
        celery_worker_stop(process)


# The session's Celery worker once started: it takes every task queued on the test queue,
# whichever test queued it.
_session_worker: list[Worker] = []


def worker_drain() -> None:
    """If the session's worker runs, wait until it is idle with nothing queued or held.

    A ping sent through its queue returns only after the tasks before it (one at a time, in
    order), but a task it ran may have queued another after the ping was sent (a processed
    batch queues the derived pass), so ping again until the only task started between two
    pings is the second ping. Tasks with a countdown (a pass that found the pass lock taken
    comes back a second later; a retry after a database error backs off) are held by the
    worker, not queued: the ping counts them, and their telemetry kick flags stay set until
    they start. The flags are read between the two pings, so a held task that starts after
    they were read is counted by the second ping."""
    if not _session_worker:
        return
    from django.core.cache import cache

    from config.celery import ping
    from telemetry.dispatch import DERIVED_KICK_KEY, KICK_KEY

    worker = _session_worker[0]

    deadline = time.monotonic() + 300

    def status() -> tuple[int, list[str]]:
        """Tasks the worker has started, and those it holds for later."""
        if worker.process.poll() is not None:
            raise RuntimeError(f"the session's celery worker exited ({worker.process.returncode})")
        wait = max(1.0, min(120.0, deadline - time.monotonic()))
        answer = ping.apply_async(queue=worker.queue, ignore_result=False).get(timeout=wait)
        return int(answer["tasks_started"]), list(answer["tasks_held"])

    before, held = status()
    flags: dict[str, object] = {}
    while time.monotonic() < deadline:
        flags = cache.get_many([KICK_KEY, DERIVED_KICK_KEY])
        after, held = status()
        if after == before + 1:
            if not held and not flags:
                return
            time.sleep(0.1)  # something waits for its time: let it come
        before = after
    raise AssertionError(
        f"the session's Celery worker never went idle: holding {held or 'nothing'}, "
        f"kick flags {sorted(flags) or 'none'} (a task retrying forever, or a countdown "
        "set under a clock frozen in the future?)"
    )


def kick_flags_clear() -> None:
    """Delete the telemetry kick flags (``telemetry.dispatch``). A flag says a task waits in
    a queue; when a test deletes the queue of a worker of its own, the flag outlives its task
    by up to its TTL and holds back every kick meanwhile — with no beat in the tests to sweep,
    the marks of a test that starts then wait for good."""
    from django.core.cache import cache

    from telemetry.dispatch import DERIVED_KICK_KEY, KICK_KEY

    cache.delete_many([KICK_KEY, DERIVED_KICK_KEY])


def cache_clear() -> None:
    """Delete the cache's own keys. ``cache.clear()`` is FLUSHDB, and the test Redis database
    is also the broker's: it would drop the session worker's queued and unacknowledged tasks
    (and kombu's exchange bindings) with it."""
    from django.conf import settings
    from django.core.cache import cache

    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def _worker_drained() -> Iterator[None]:
    """After every test, once the worker runs, wait until it has taken what the test queued.
    Set up before the apps' own autouse fixtures, it runs after their teardown (which empties
    the windows and marks), so what is left finds nothing to do; without it a backlog of
    passes leaked into later tests that stage passes by hand."""
    yield
    worker_drain()

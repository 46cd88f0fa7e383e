"""A real worker process on the real broker runs tasks against the test database."""

import os

import pytest

from config.celery import ping

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_worker_runs_a_task_in_another_process_on_the_test_database(celery_worker, settings):
    result = ping.apply_async(queue=celery_worker.queue, ignore_result=False).get(timeout=30)
    assert result["pong"] is True
    assert result["pid"] == celery_worker.process.pid  # solo pool: runs in the worker itself
    assert result["pid"] != os.getpid()
    assert result["database"] == settings.DATABASES["default"]["NAME"]
    assert result["database"].startswith("test_")


def test_tasks_queued_on_commit_reach_the_worker(celery_worker):
    from django.db import transaction

    results = []
    with transaction.atomic():
        transaction.on_commit(
            lambda: results.append(ping.apply_async(queue=celery_worker.queue, ignore_result=False))
        )
        assert results == []  # nothing leaves before the commit
    assert results[0].get(timeout=30)["pong"] is True


def test_the_tests_cache_clear_leaves_the_broker_alone(celery_worker):
    """The cache and the broker share the test Redis database: the tests empty the cache by
    its key prefix (FLUSHDB would also take queued tasks and kombu's bindings), so the
    worker's keys survive and a task still arrives."""
    from django.core.cache import cache

    from tests.conftest import cache_clear

    client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    bindings = set(client.scan_iter(match="_kombu.binding.*"))
    assert bindings  # the worker declared its queue
    client.set("not-the-cache", 1)
    cache.set("throttle-count", 3)
    cache_clear()
    assert cache.get("throttle-count") is None
    assert client.get("not-the-cache") == b"1"
    assert set(client.scan_iter(match="_kombu.binding.*")) == bindings
    client.delete("not-the-cache")
    assert ping.apply_async(queue=celery_worker.queue, ignore_result=False).get(timeout=30)["pong"]

"""The default cache (Redis) reuses one redis-py client per pool and behaves as Django's."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from config.cache import ReusedClientRedisCache


def _default() -> Any:
    return caches["default"]


def test_the_default_cache_reuses_its_client() -> None:
    backend = _default()
    assert isinstance(backend, ReusedClientRedisCache)
    client: Any = backend._cache
    assert client.get_client() is client.get_client(write=True)
    assert client.get_client().connection_pool is client._get_connection_pool(True)


def test_it_reads_and_writes_as_djangos_redis_cache() -> None:
    backend = _default()
    reference = RedisCache(backend._servers, {"KEY_PREFIX": backend.key_prefix})
    key = f"test-cache:{uuid.uuid4().hex}"
    backend.set(key, [1.5, 2.5], 60)
    assert reference.get(key) == [1.5, 2.5]
    reference.set(key, {"a": 1}, 60)
    assert backend.get(key) == {"a": 1}
    assert backend.add(key, "other") is False
    backend.set(f"{key}:n", 1, 60)
    assert backend.incr(f"{key}:n", 5) == 6
    assert backend.get_many([key, f"{key}:n"]) == {key: {"a": 1}, f"{key}:n": 6}
    backend.delete_many([key, f"{key}:n"])
    assert reference.get(key) is None


def test_one_client_serves_several_threads() -> None:
    backend = ReusedClientRedisCache(
        _default()._servers, {"KEY_PREFIX": f"test-cache-{uuid.uuid4().hex}"}
    )
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                backend.set(f"{n}:{i}", (n, i), 60)
                assert backend.get(f"{n}:{i}") == (n, i)
                backend.delete(f"{n}:{i}")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

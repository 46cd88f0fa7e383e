"""The per-key throttle's sliding window, counted in Redis: exact under concurrent requests
(DRF's read-modify-write history under-counts a burst spread over workers), refused requests
not counted, and the window sliding request by request."""

from __future__ import annotations

import threading
import uuid

from api.throttling import _sliding_window


def _key() -> str:
    return f"test:throttle:{uuid.uuid4()}"


def test_a_burst_from_many_workers_gets_exactly_the_limit():
    key, allowed, lock = _key(), [], threading.Lock()
    barrier = threading.Barrier(16)

    def worker() -> None:
        barrier.wait()
        mine = [_sliding_window(key, now=1000.0, window=60, limit=50)[0] for _ in range(10)]
        with lock:
            allowed.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 160
    assert sum(allowed) == 50


def test_the_window_slides_and_refusals_do_not_count():
    key = _key()
    assert _sliding_window(key, now=100.0, window=60, limit=2) == (True, 0, 100.0)
    assert _sliding_window(key, now=130.0, window=60, limit=2) == (True, 1, 100.0)
    # Full: refused, and the refusals leave the window as it was.
    for now in (131.0, 150.0, 159.5):
        assert _sliding_window(key, now=now, window=60, limit=2) == (False, 2, 100.0)
    # At 160 the request of 100 has left (a time exactly one window old is out, as in DRF).
    assert _sliding_window(key, now=160.0, window=60, limit=2) == (True, 1, 130.0)
    assert _sliding_window(key, now=170.0, window=60, limit=2) == (False, 2, 130.0)
    assert _sliding_window(key, now=190.0, window=60, limit=2) == (True, 1, 160.0)

"""Run NVML calls on a worker thread with a deadline, because they can hang in the kernel.

A thread cannot be killed, so a call that overruns leaves its worker busy.  The watchdog then
refuses new work (raising `NvmlStall` at once) until the stuck call returns: this never piles up
threads behind a hung driver and tells the caller the GPU is still stalled.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class NvmlStall(Exception):
    """An NVML call did not return within its deadline (or an earlier one still has not)."""

    def __init__(self, call: str, timeout_s: float, still_running: bool) -> None:
        super().__init__(f"{call} did not return within {timeout_s:g}s")
        self.call = call
        self.timeout_s = timeout_s
        self.still_running = still_running


class _Job:
    """One queued call and, once done, its outcome."""

    __slots__ = ("done", "error", "fn", "label", "result")

    def __init__(self, fn: Callable[[], Any], label: str) -> None:
        self.fn = fn
        self.label = label
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Watchdog:
    """One daemon worker thread; `call` runs a function on it with a timeout."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._stuck: _Job | None = None
        self._thread = threading.Thread(target=self._run, name=f"nvml-{name}", daemon=True)
        self._thread.start()
        # Which NVML function the worker is inside right now, for the stall report.
        self.current_call = ""

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as exc:
                job.error = exc  # handed to the caller as is
                if not isinstance(exc, Exception):
                    raise  # SystemExit and the like end the worker, as they should
            finally:
                job.done.set()

    @property
    def stalled(self) -> bool:
        """True while a call that overran its deadline is still running."""
        stuck = self._stuck
        if stuck is not None and stuck.done.is_set():
            self._stuck = None
            return False
        return stuck is not None

    def submit(self, fn: Callable[[], Any], label: str = "") -> _Job:
        """Queue `fn`; raises NvmlStall at once if an earlier call is still stuck."""
        if self.stalled:
            stuck = self._stuck
            raise NvmlStall(stuck.label if stuck else label, 0.0, True)
        job = _Job(fn, label)
        self._jobs.put(job)
        return job

    def result(self, job: _Job, deadline: float, timeout_s: float) -> Any:
        """Wait for `job` until `deadline` (time.monotonic); NvmlStall if it is not done."""
        if not job.done.wait(max(0.0, deadline - time.monotonic())):
            job.label = self.current_call or job.label
            self._stuck = job
            raise NvmlStall(job.label, timeout_s, False)
        if job.error is not None:
            raise job.error
        return job.result

    def call(self, fn: Callable[[], T], timeout_s: float, label: str = "") -> T:
        job = self.submit(fn, label)
        result: T = self.result(job, time.monotonic() + timeout_s, timeout_s)
        return result

    def close(self) -> None:
        self._jobs.put(None)

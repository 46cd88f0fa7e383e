"""Pausing Python's cyclic garbage collector around bulk work that builds no cycles."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses the cyclic collector for the block; nested uses leave it to the outermost.

    The ingest worker's claims and the month close each build hundreds of thousands of small
    objects (structs, rows, cells, decimals) that live until the block ends and sit in no
    reference cycle: reference counting frees them all. The collector, running every 700
    allocations, walked the survivors again and again for nothing: profiled, 30–40 % of the
    window path's CPU and 40–55 % of computing statements. Both blocks are bounded, so memory
    is too; the collector resumes afterwards and frees any cycle left then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

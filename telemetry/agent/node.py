"""What the agent knows about each GPU of the node between samples."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from .clock import Clock
from .reader import UTIL_KINDS, GpuReader, NvmlModule
from .utilization import SampleStream
from .watchdog import Watchdog
from .windows import WindowBuilder

# Conditions a GPU can be in besides "ok"; each is also the state_reason of a down window.
LOST = "gpu_is_lost"
RESET = "reset_required"
STALL = "nvml_stall"
MISSING = "gpu_missing"
PENDING = "pending"  # known from an earlier run, not enumerated yet in this one


@dataclass(slots=True)
class GpuTrack:
    uuid: str
    identity: dict[str, Any]
    watchdog: Watchdog
    handle: Any = None
    reader: GpuReader | None = None
    unsupported: set[str] = field(default_factory=set)
    condition: str = "ok"
    condition_since: float = 0.0
    window: WindowBuilder | None = None
    # The previous minute's window, until the first read after its end finalizes it.
    closing: WindowBuilder | None = None
    events_registered: bool = False
    streams: dict[str, SampleStream] = field(
        default_factory=lambda: {k: SampleStream() for k in UTIL_KINDS}
    )

    def attach(self, nvml: NvmlModule, handle: Any, clock: Clock | None = None) -> None:
        """A (new) handle after enumeration; what is unsupported and where the sample buffer
        was read to stay remembered."""
        self.handle = handle
        self.events_registered = False
        wd = self.watchdog

        def note(call: str) -> None:
            wd.current_call = call

        self.reader = GpuReader(
            nvml, handle, self.unsupported, note, clock=clock, streams=self.streams
        )


def handle_key(handle: Any) -> int:
    """A hashable identity for an NVML device handle (a ctypes pointer: its address)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)

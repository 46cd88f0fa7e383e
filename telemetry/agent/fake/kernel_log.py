"""The fake node's kernel log: the ``NVRM: Xid`` lines a real driver prints.

Lines are kept in memory and, given a path, appended to a file in the ``journalctl -k -o
short-iso-precise`` shape, which the agent's kernel-log reader tails like /dev/kmsg.
"""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .device import FakeGpu


class FakeKernelLog:
    def __init__(self, path: str | None = None, hostname: str = "fake-node") -> None:
        self.path = Path(path) if path is not None else None
        self.hostname = hostname
        self.lines: list[str] = []
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.touch()

    def write(self, when: float, message: str) -> None:
        stamp = dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="microseconds")
        line = f"{stamp} {self.hostname} kernel: {message}"
        with self._lock:
            self.lines.append(line)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")

    def xid(self, when: float, gpu: FakeGpu, xid: int, text: str) -> None:
        detail = text or "pid=<unknown>, name=<unknown>"
        self.write(when, f"NVRM: Xid (PCI:{gpu.kernel_bus_id}): {xid}, {detail}")

"""XIDs from the kernel log, because some (79: fallen off the bus) never reach NVML events.

Reads either /dev/kmsg (one record per read: ``prio,seq,usec,flags;message``) or a text file
that something appends to (``journalctl -k -o short-iso-precise -f > file``, kern.log), without
blocking: `poll()` returns what is new.  The position is a small JSON cursor that the agent
stores in the same spool transaction as the events it produced, so after a restart nothing is
reported twice or skipped.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .clock import Clock

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\):"
    r"\s*(?P<xid>\d+)(?:,\s*(?P<rest>.*))?"
)
_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_ISO = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
_READ_LIMIT = 1 << 20

PciKey = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class XidLine:
    occurred_at: float
    pci: PciKey
    xid: int
    message: str
    seq: int | None = None


def pci_key(bus_id: str) -> PciKey | None:
    """(domain, bus, device) from NVML's ``00000000:1B:00.0`` or the kernel's ``0000:1b:00``."""
    parts = bus_id.strip().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)
    except ValueError:
        return None


def parse_line(line: str, *, now: float, boot_time: float) -> XidLine | None:
    """An XidLine if `line` (kmsg record, ISO-stamped or bare text) carries an NVRM Xid."""
    seq: int | None = None
    when = now
    kmsg = _KMSG.match(line)
    if kmsg:
        seq = int(kmsg.group("seq"))
        when = boot_time + int(kmsg.group("usec")) / 1_000_000
        line = kmsg.group("msg")
    else:
        iso = _ISO.match(line)
        if iso:
            stamp = iso.group("ts").replace(",", ".").replace("Z", "+00:00")
            parsed = dt.datetime.fromisoformat(stamp)
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            when = parsed.timestamp()
    match = _XID.search(line)
    if not match:
        return None
    key = pci_key(match.group("bus"))
    if key is None:
        return None
    return XidLine(when, key, int(match.group("xid")), (match.group("rest") or "").strip(), seq)


class KernelLogReader:
    def __init__(self, source: str, *, clock: Clock, cursor: dict[str, Any] | None = None):
        self.source = source
        self.clock = clock
        self._fd: int | None = None
        self._record_mode = False  # /dev/kmsg: one record per read()
        self._offset = 0
        self._inode = 0
        self._last_seq = -1
        self._boot_id = _boot_id()
        self._pending = b""
        self._open(cursor or {})

    def _open(self, cursor: dict[str, Any]) -> None:
        fd = os.open(self.source, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        self._fd, self._inode = fd, st.st_ino
        self._record_mode = stat.S_ISCHR(st.st_mode)
        if self._record_mode:
            same_boot = cursor.get("boot_id") == self._boot_id and "seq" in cursor
            if same_boot:
                self._last_seq = int(cursor["seq"])  # re-read the ring, skip what we saw
            else:
                os.lseek(fd, 0, os.SEEK_END)  # a new boot or first run: only what comes next
        elif cursor.get("inode") == st.st_ino and int(cursor.get("offset", -1)) <= st.st_size:
            self._offset = int(cursor["offset"])
        elif cursor:
            self._offset = 0  # rotated: the new file is all unread
        else:
            self._offset = st.st_size  # first run: do not replay history
        if not self._record_mode:
            os.lseek(fd, self._offset, os.SEEK_SET)

    def cursor(self) -> dict[str, Any]:
        if self._record_mode:
            return {"boot_id": self._boot_id, "seq": self._last_seq}
        return {"inode": self._inode, "offset": self._offset}

    def poll(self) -> list[XidLine]:
        now = self.clock.now()
        boot_time = now - time.clock_gettime(time.CLOCK_MONOTONIC)
        lines = self._read_records() if self._record_mode else self._read_file()
        found: list[XidLine] = []
        for text in lines:
            xid = parse_line(text, now=now, boot_time=boot_time)
            if xid is None:
                continue
            found.append(xid)
        return found

    def _read_records(self) -> list[str]:
        if self._fd is None:
            raise RuntimeError("the kernel log is not open")
        out: list[str] = []
        while len(out) < 10_000:
            try:
                data = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the ring overwrote records we had not read yet; go on
                raise
            if not data:
                break
            record = data.decode("utf-8", "replace").split("\n", 1)[0]
            match = _KMSG.match(record)
            if match:
                seq = int(match.group("seq"))
                if seq <= self._last_seq:
                    continue
                out.append(record)
                self._last_seq = seq
        return out

    def _read_file(self) -> list[str]:
        if self._fd is None:
            raise RuntimeError("the kernel log is not open")
        if os.fstat(self._fd).st_size < self._offset + len(self._pending):
            self._offset, self._pending = 0, b""  # truncated in place: start over
            os.lseek(self._fd, 0, os.SEEK_SET)
        data = os.read(self._fd, _READ_LIMIT)
        if not data:
            return []
        buf = self._pending + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._pending = buf  # half a line: wait for the rest
            return []
        complete, self._pending = buf[:cut], buf[cut + 1 :]
        # The cursor only ever points at a line start, so a restart never splits a line.
        self._offset += cut + 1
        return complete.decode("utf-8", "replace").splitlines()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""

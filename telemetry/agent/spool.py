"""SQLite (WAL) spool of sealed batches: nothing leaves it before the server answers 2xx.

* A batch is written once, in one transaction with whatever it consumed (kernel-log cursor,
  last window per GPU, drop and dead-letter reports), so a crash either keeps both or neither.
* Every body carries its SHA-256; a row whose bytes no longer match (a torn or corrupted
  record) is moved to ``quarantine`` instead of being sent, and reported in a later batch.
* A file SQLite itself calls corrupt is moved aside and every readable row is salvaged.
* The spool is capped by total body bytes and by age; what it drops is reported as a
  ``spool_dropped`` event in a later batch and logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .clock import Clock
from .events import AgentEvent
from .uuid7 import uuid7

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    body BLOB NOT NULL,
    body_sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    n_windows INTEGER NOT NULL,
    n_events INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_attempt_at REAL,
    last_status INTEGER,
    last_error TEXT
);
CREATE TABLE IF NOT EXISTS dead_letter (
    batch_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    dead_at REAL NOT NULL,
    status INTEGER NOT NULL,
    response TEXT NOT NULL,
    body BLOB NOT NULL,
    reported INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER,
    batch_id TEXT,
    reason TEXT NOT NULL,
    body BLOB,
    quarantined_at REAL NOT NULL,
    reported INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_SALVAGE_COPIES = (
    ("SELECT key, value FROM state", "INSERT OR IGNORE INTO state VALUES (?, ?)"),
    (
        "SELECT batch_id, created_at, dead_at, status, response, body, reported FROM dead_letter",
        "INSERT OR IGNORE INTO dead_letter VALUES (?, ?, ?, ?, ?, ?, ?)",
    ),
)
_DROPPED_KEY = "spool.dropped"
# Caps only so the node's disk cannot fill: 90 days is the server's raw retention (older
# windows are refused there anyway); 1 GiB holds more than that of an 8-GPU node.
MAX_BYTES = 1024 * 1024 * 1024
MAX_AGE_S = 90 * 24 * 3600.0
_GZIP_MAGIC = b"\x1f\x8b"
BuildBody = Callable[[str, list[dict[str, Any]]], bytes]


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    seq: int
    batch_id: str
    created_at: float
    body: bytes
    attempts: int


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Spool:
    def __init__(
        self,
        path: str,
        *,
        clock: Clock,
        max_bytes: int = MAX_BYTES,
        max_age_s: float = MAX_AGE_S,
        dead_letter_max: int = 1000,
    ) -> None:
        self.path = path
        self.clock = clock
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.dead_letter_max = dead_letter_max
        # One connection shared by the sampling and delivery threads, serialized here.
        self._lock = threading.RLock()
        self._db = self._open()

    # -- opening and salvage -----------------------------------------------------------------

    def _connect(self, path: str) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a sealed batch survives power loss, not only a process crash.
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _open(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect(self.path)
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise _Corrupt(str(check))
            conn.executescript(_SCHEMA)
            return conn
        except (sqlite3.DatabaseError, _Corrupt) as exc:
            if not _is_corruption(exc):
                raise
            if conn is not None:
                conn.close()
            return self._salvage(str(exc))

    def _salvage(self, why: str) -> sqlite3.Connection:
        aside = f"{self.path}.corrupt-{int(self.clock.now())}"
        log.error("spool %s is corrupt (%s); moving it to %s and salvaging", self.path, why, aside)
        for suffix in ("", "-wal", "-shm"):
            damaged = Path(self.path + suffix)
            if damaged.exists():
                damaged.replace(aside + suffix)
        fresh = self._connect(self.path)
        fresh.executescript(_SCHEMA)
        old = sqlite3.connect(aside, isolation_level=None)
        now = self.clock.now()
        kept = quarantined = 0
        try:
            for seq, row, error in _salvageable_batches(old, aside):
                if row is None:
                    quarantined += 1
                    fresh.execute(
                        "INSERT INTO quarantine (seq, reason, quarantined_at) VALUES (?, ?, ?)",
                        (seq, f"unreadable after corruption: {error}", now),
                    )
                    continue
                batch_id, created_at, body, digest, n_windows, n_events = row
                if not isinstance(body, bytes) or sha256_hex(body) != digest:
                    quarantined += 1
                    fresh.execute(
                        "INSERT INTO quarantine (seq, batch_id, reason, body, quarantined_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (seq, batch_id, "body does not match its sha256", body, now),
                    )
                    continue
                kept += 1
                fresh.execute(
                    "INSERT INTO batch (seq, batch_id, created_at, body, body_sha256, size, "
                    "n_windows, n_events) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (seq, batch_id, created_at, body, digest, len(body), n_windows, n_events),
                )
            for select, insert in _SALVAGE_COPIES:
                try:
                    rows = old.execute(select).fetchall()
                except sqlite3.DatabaseError:
                    continue
                fresh.executemany(insert, rows)
        finally:
            old.close()
        log.error("spool salvage kept %d batches, quarantined %d", kept, quarantined)
        return fresh

    # -- writing -----------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def seal(
        self,
        build: BuildBody,
        *,
        n_windows: int,
        n_events: int,
        state: dict[str, Any] | None = None,
    ) -> str:
        """Build and store one batch atomically; returns its id.

        `build(batch_id, housekeeping_events)` returns the gzipped body; the housekeeping
        events (drops, quarantines, dead letters not yet reported) must go into it.
        """
        now = self.clock.now()
        with self._tx() as db:
            extra = self._housekeeping_events(db, now)
            batch_id = str(uuid7())
            body = build(batch_id, extra)
            db.execute(
                "INSERT INTO batch (batch_id, created_at, body, body_sha256, size, n_windows, "
                "n_events) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    batch_id,
                    now,
                    body,
                    sha256_hex(body),
                    len(body),
                    n_windows,
                    n_events + len(extra),
                ),
            )
            if extra:
                db.execute("UPDATE dead_letter SET reported = 1 WHERE reported = 0")
                db.execute("UPDATE quarantine SET reported = 1 WHERE reported = 0")
                db.execute("DELETE FROM state WHERE key = ?", (_DROPPED_KEY,))
            for key, value in (state or {}).items():
                self._put_state(db, key, value)
            self._enforce_caps(db, now, keep=batch_id)
        return batch_id

    def _housekeeping_events(self, db: sqlite3.Connection, now: float) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        dropped = self._get_state(db, _DROPPED_KEY)
        if dropped:
            events.append(AgentEvent("spool_dropped", now, detail=dropped).to_wire())
        for batch_id, status, response, dead_at in db.execute(
            "SELECT batch_id, status, response, dead_at FROM dead_letter WHERE reported = 0 "
            "ORDER BY dead_at"
        ):
            detail = {"batch_id": batch_id, "status": status, "response": response[:500]}
            events.append(AgentEvent("batch_rejected", dead_at, detail=detail).to_wire())
        for seq, batch_id, reason, at in db.execute(
            "SELECT seq, batch_id, reason, quarantined_at FROM quarantine WHERE reported = 0 "
            "ORDER BY id"
        ):
            detail = {"seq": seq, "batch_id": batch_id, "reason": reason}
            events.append(AgentEvent("spool_quarantined", at, detail=detail).to_wire())
        return events

    def _enforce_caps(self, db: sqlite3.Connection, now: float, keep: str) -> None:
        total = db.execute("SELECT COALESCE(SUM(size), 0) FROM batch").fetchone()[0]
        victims: list[tuple[int, str, float, int, int, int]] = []
        cutoff = now - self.max_age_s
        for seq, batch_id, created_at, size, n_windows, n_events in db.execute(
            "SELECT seq, batch_id, created_at, size, n_windows, n_events FROM batch "
            "WHERE batch_id != ? ORDER BY seq",
            (keep,),
        ):
            if total <= self.max_bytes and created_at >= cutoff:
                break
            victims.append((seq, batch_id, created_at, size, n_windows, n_events))
            total -= size
        if not victims:
            return
        db.executemany("DELETE FROM batch WHERE seq = ?", [(v[0],) for v in victims])
        report = self._get_state(db, _DROPPED_KEY) or {
            "batches": 0,
            "bytes": 0,
            "windows": 0,
            "events": 0,
            "oldest_created_at": victims[0][2],
        }
        report["batches"] += len(victims)
        report["bytes"] += sum(v[3] for v in victims)
        report["windows"] += sum(v[4] for v in victims)
        report["events"] += sum(v[5] for v in victims)
        report["newest_created_at"] = victims[-1][2]
        self._put_state(db, _DROPPED_KEY, report)
        log.warning(
            "spool over its cap (%d bytes, %.0f s): dropped %d oldest batches (%d windows)",
            self.max_bytes,
            self.max_age_s,
            len(victims),
            sum(v[4] for v in victims),
        )

    # -- reading and delivery bookkeeping ------------------------------------------------------

    def oldest(self) -> SpooledBatch | None:
        """The oldest batch whose bytes verify; torn or corrupted ones are quarantined."""
        while True:
            with self._lock:
                row = self._db.execute(
                    "SELECT seq, batch_id, created_at, body, body_sha256, attempts FROM batch "
                    "ORDER BY seq LIMIT 1"
                ).fetchone()
            if row is None:
                return None
            seq, batch_id, created_at, body, digest, attempts = row
            if isinstance(body, bytes) and body[:2] == _GZIP_MAGIC and sha256_hex(body) == digest:
                return SpooledBatch(seq, batch_id, created_at, body, attempts)
            self.quarantine(seq, batch_id, body, "body does not match its sha256")

    def quarantine(self, seq: int, batch_id: str, body: object, reason: str) -> None:
        log.error("spool: quarantining batch %s (seq %d): %s", batch_id, seq, reason)
        with self._tx() as db:
            db.execute(
                "INSERT INTO quarantine (seq, batch_id, reason, body, quarantined_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (seq, batch_id, reason, body, self.clock.now()),
            )
            db.execute("DELETE FROM batch WHERE seq = ?", (seq,))

    def delete(self, batch_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM batch WHERE batch_id = ?", (batch_id,))

    def record_attempt(self, batch_id: str, status: int | None, error: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE batch SET attempts = attempts + 1, last_attempt_at = ?, last_status = ?, "
                "last_error = ? WHERE batch_id = ?",
                (self.clock.now(), status, error, batch_id),
            )

    def dead_letter(self, batch: SpooledBatch, status: int, response: str) -> None:
        """Move a batch the server refused for good out of the queue (kept for inspection)."""
        now = self.clock.now()
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO dead_letter (batch_id, created_at, dead_at, status, "
                "response, body) VALUES (?, ?, ?, ?, ?, ?)",
                (batch.batch_id, batch.created_at, now, status, response[:4000], batch.body),
            )
            db.execute("DELETE FROM batch WHERE batch_id = ?", (batch.batch_id,))
            db.execute(
                "DELETE FROM dead_letter WHERE reported = 1 AND batch_id NOT IN "
                "(SELECT batch_id FROM dead_letter ORDER BY dead_at DESC LIMIT ?)",
                (self.dead_letter_max,),
            )

    # -- state (small JSON values) -------------------------------------------------------------

    def _get_state(self, db: sqlite3.Connection, key: str) -> Any:
        row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _put_state(self, db: sqlite3.Connection, key: str, value: Any) -> None:
        db.execute(
            "INSERT INTO state (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    def get_state(self, key: str) -> Any:
        with self._lock:
            return self._get_state(self._db, key)

    def set_state(self, key: str, value: Any) -> None:
        with self._tx() as db:
            self._put_state(db, key, value)

    # -- inspection ------------------------------------------------------------------------------

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM batch").fetchone()[0])

    def batch_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT batch_id FROM batch ORDER BY seq")]

    def dead_letters(self) -> list[tuple[str, int, str]]:
        with self._lock:
            return list(
                self._db.execute(
                    "SELECT batch_id, status, response FROM dead_letter ORDER BY dead_at"
                )
            )

    def quarantined(self) -> list[tuple[int | None, str | None, str]]:
        with self._lock:
            return list(
                self._db.execute("SELECT seq, batch_id, reason FROM quarantine ORDER BY id")
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Corrupt(Exception):
    pass


def _is_corruption(exc: BaseException) -> bool:
    if isinstance(exc, _Corrupt):
        return True
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


_ROW_SQL = (
    "SELECT batch_id, created_at, body, body_sha256, n_windows, n_events FROM batch WHERE seq = ?"
)


def _salvageable_batches(
    old: sqlite3.Connection, aside: str
) -> Iterator[tuple[int, tuple[Any, ...] | None, str]]:
    """Rows of the damaged file; if some are unreadable, try again on a header-fixed copy."""
    found = {seq: (row, error) for seq, row, error in _readable_batches(old)}
    if all(row is not None for row, _ in found.values()) and found:
        yield from ((seq, row, err) for seq, (row, err) in sorted(found.items()))
        return
    patched = _header_patched_copy(aside)
    if patched is not None:
        again = sqlite3.connect(patched, isolation_level=None)
        try:
            for seq, row, error in _readable_batches(again):
                if found.get(seq, (None, ""))[0] is None:
                    found[seq] = (row, error)
        finally:
            again.close()
            Path(patched).unlink(missing_ok=True)
    yield from ((seq, row, err) for seq, (row, err) in sorted(found.items()))


def _header_patched_copy(aside: str) -> str | None:
    """A copy whose header page count matches the file, for a file cut short.

    SQLite trusts the page count in the header and calls the whole file malformed when the
    file is shorter; with the count fixed, every page that survived reads normally again.
    """
    raw = bytearray(Path(aside).read_bytes())
    if len(raw) < 100 or not raw.startswith(b"SQLite format 3\x00"):
        return None
    page_size = int.from_bytes(raw[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    claimed = int.from_bytes(raw[28:32], "big")
    actual = len(raw) // page_size
    if not 0 < actual < claimed:
        return None
    raw[28:32] = actual.to_bytes(4, "big")
    copy = f"{aside}.readable"
    Path(copy).write_bytes(bytes(raw[: actual * page_size]))
    return copy


def _readable_batches(
    old: sqlite3.Connection,
) -> Iterator[tuple[int, tuple[Any, ...] | None, str]]:
    """(seq, row or None, error) for every batch row of a damaged spool, one row at a time."""
    seqs: list[int] = []
    try:
        for (seq,) in old.execute("SELECT seq FROM batch ORDER BY seq"):
            seqs.append(seq)
    except sqlite3.DatabaseError:
        pass  # keep what was listed before the damaged page
    try:
        highest = old.execute("SELECT seq FROM sqlite_sequence WHERE name = 'batch'").fetchone()
        top = int(highest[0]) if highest else 0
    except sqlite3.DatabaseError:
        top = 0
    last_listed = seqs[-1] if seqs else 0
    # Rows after the last one we could list may still be readable one by one.
    candidates = seqs + list(range(last_listed + 1, top + 1))
    for seq in candidates:
        try:
            row = old.execute(_ROW_SQL, (seq,)).fetchone()
        except sqlite3.DatabaseError as exc:
            yield seq, None, str(exc)
            continue
        if row is not None:
            yield seq, tuple(row), ""

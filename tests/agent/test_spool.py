"""The spool: order, caps and their reports, dead letters, torn and corrupt records."""

import logging
import secrets
import shutil
from typing import Any

import pytest

from telemetry.agent.clock import FakeClock
from telemetry.agent.schema import build_body, read_body
from telemetry.agent.spool import Spool

from .conftest import START
from .helpers import head


def seal(spool: Spool, n: int = 1, pad: int = 0, **kw: Any) -> list[str]:
    ids = []
    for i in range(n):

        def build(batch_id: str, extra: list[dict[str, Any]], i: int = i) -> bytes:
            return build_body(
                batch_id=batch_id,
                sealed_at=spool.clock.now(),
                agent={"version": "t"},
                gpus=[],
                windows=[{"n": i, "pad": secrets.token_hex(pad // 2)}],  # incompressible
                events=extra,
            )

        ids.append(spool.seal(build, n_windows=1, n_events=0, **kw))
    return ids


def test_oldest_first_and_delete_only_on_request(tmp_path):
    spool = Spool(str(tmp_path / "s.db"), clock=FakeClock(START))
    ids = seal(spool, 3)
    assert head(spool).batch_id == ids[0]
    assert head(spool).batch_id == ids[0]  # reading never removes
    spool.delete(ids[0])
    assert [head(spool).batch_id, spool.count()] == [ids[1], 2]
    assert read_body(head(spool).body)["batch_id"] == ids[1]
    spool.close()


def test_state_is_written_with_the_batch(tmp_path):
    spool = Spool(str(tmp_path / "s.db"), clock=FakeClock(START))
    seal(spool, 1, state={"kmsg.cursor": {"offset": 42}})
    assert spool.get_state("kmsg.cursor") == {"offset": 42}

    def broken(batch_id, extra):
        raise RuntimeError("no body")

    with pytest.raises(RuntimeError):
        spool.seal(broken, n_windows=0, n_events=0, state={"kmsg.cursor": {"offset": 99}})
    assert spool.get_state("kmsg.cursor") == {"offset": 42}  # rolled back together
    assert spool.count() == 1
    spool.close()


def test_size_cap_drops_oldest_and_reports_it_in_a_later_batch(tmp_path, caplog):
    clock = FakeClock(START)
    spool = Spool(str(tmp_path / "s.db"), clock=clock, max_bytes=3000)
    caplog.set_level(logging.WARNING)
    ids = seal(spool, 10, pad=2000)  # ~1.1 KB gzipped each: only two fit under the cap
    with spool._lock:
        total = spool._db.execute("SELECT SUM(size) FROM batch").fetchone()[0]
    assert spool.batch_ids() == ids[-2:]
    assert total <= 3000
    assert "dropped 1 oldest batches (1 windows)" in caplog.text
    (next_id,) = seal(spool, 1, pad=2000)
    events = read_body(_body(spool, next_id))["events"]
    (dropped,) = [e for e in events if e["kind"] == "spool_dropped"]
    # Each seal reports what the previous one had to drop; this one dropped one more.
    assert (dropped["detail"]["batches"], dropped["detail"]["windows"]) == (1, 1)
    assert spool.get_state("spool.dropped")["batches"] == 1
    spool.close()


def _body(spool: Spool, batch_id: str) -> bytes:
    with spool._lock:
        (body,) = spool._db.execute(
            "SELECT body FROM batch WHERE batch_id = ?", (batch_id,)
        ).fetchone()
    assert isinstance(body, bytes)
    return body


def test_age_cap(tmp_path):
    clock = FakeClock(START)
    spool = Spool(str(tmp_path / "s.db"), clock=clock, max_age_s=3600)
    old = seal(spool, 2)
    clock.advance(3601)
    new = seal(spool, 1)
    assert spool.batch_ids() == new
    events = read_body(_body(spool, seal(spool, 1)[0]))["events"]
    (dropped,) = [e for e in events if e["kind"] == "spool_dropped"]
    assert dropped["detail"]["batches"] == len(old) == 2
    spool.close()


def test_dead_letter_is_reported_once_in_the_next_batch(tmp_path):
    spool = Spool(str(tmp_path / "s.db"), clock=FakeClock(START))
    (bad,) = seal(spool, 1)
    spool.dead_letter(head(spool), 422, '{"windows": ["bad"]}')
    assert spool.count() == 0
    assert spool.dead_letters() == [(bad, 422, '{"windows": ["bad"]}')]
    (first,) = seal(spool, 1)
    (second,) = seal(spool, 1)
    rejected = [
        e for e in read_body(_body(spool, first))["events"] if e["kind"] == "batch_rejected"
    ]
    assert [e["detail"]["batch_id"] for e in rejected] == [bad]
    assert rejected[0]["detail"]["status"] == 422
    assert read_body(_body(spool, second))["events"] == []
    spool.close()


def test_torn_row_is_quarantined_and_the_rest_delivered(tmp_path):
    spool = Spool(str(tmp_path / "s.db"), clock=FakeClock(START))
    ids = seal(spool, 3)
    # A torn write: the body stops half way while its recorded hash is the full one's.
    with spool._lock:
        spool._db.execute(
            "UPDATE batch SET body = substr(body, 1, 20) WHERE batch_id = ?", (ids[1],)
        )
    assert head(spool).batch_id == ids[0]
    spool.delete(ids[0])
    assert head(spool).batch_id == ids[2]
    assert spool.quarantined() == [(2, ids[1], "body does not match its sha256")]
    (report,) = seal(spool, 1)
    (q,) = [
        e for e in read_body(_body(spool, report))["events"] if e["kind"] == "spool_quarantined"
    ]
    assert q["detail"]["batch_id"] == ids[1]
    spool.close()


def test_corrupted_bytes_of_the_last_record_in_the_file(tmp_path):
    path = tmp_path / "s.db"
    spool = Spool(str(path), clock=FakeClock(START))
    ids = seal(spool, 4, pad=50)
    last = _body(spool, ids[-1])
    with spool._lock:
        spool._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    spool.close()
    raw = bytearray(path.read_bytes())
    at = raw.rfind(last)
    assert at > 0
    raw[at + 15 : at + 19] = b"\x00\x00\x00\x00"  # a flipped stretch inside the body
    path.write_bytes(bytes(raw))
    spool = Spool(str(path), clock=FakeClock(START))
    delivered = []
    while (batch := spool.oldest()) is not None:
        delivered.append(batch.batch_id)
        spool.delete(batch.batch_id)
    assert delivered == ids[:3]
    assert [q[1] for q in spool.quarantined()] == [ids[3]]
    spool.close()


def test_truncated_database_file_is_moved_aside_and_salvaged(tmp_path, caplog):
    path = tmp_path / "s.db"
    spool = Spool(str(path), clock=FakeClock(START))
    # Bodies of ~7 KB spill into overflow pages: the last page belongs to the last record.
    ids = seal(spool, 6, pad=12000)
    with spool._lock:
        spool._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = spool._db.execute("PRAGMA page_size").fetchone()[0]
    spool.close()
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(size - page)
    caplog.set_level(logging.ERROR)
    spool = Spool(str(path), clock=FakeClock(START))
    assert "corrupt" in caplog.text
    assert list(tmp_path.glob("s.db.corrupt-*"))
    kept = spool.batch_ids()
    quarantined = spool.quarantined()
    assert kept == ids[:5]  # everything but the torn last record
    assert [(q[0], q[1]) for q in quarantined] == [(6, None)]
    assert "unreadable" in quarantined[0][2]
    spool.close()


def test_a_torn_wal_tail_loses_only_the_uncommitted_transaction(tmp_path):
    path = tmp_path / "s.db"
    spool = Spool(str(path), clock=FakeClock(START))
    ids = seal(spool, 5, pad=300)
    # Snapshot the files as a crash would leave them (WAL not checkpointed), then tear the
    # last frame of the WAL in the copy.
    crash = tmp_path / "crash"
    crash.mkdir()
    shutil.copy(path, crash / "s.db")
    shutil.copy(str(path) + "-wal", crash / "s.db-wal")
    spool.close()
    wal = crash / "s.db-wal"
    wal.write_bytes(wal.read_bytes()[:-100])
    again = Spool(str(crash / "s.db"), clock=FakeClock(START))
    assert again.batch_ids() == ids[:4]  # the torn commit never happened; the rest is intact
    with again._lock:
        assert again._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    again.close()

"""A real writer process killed with SIGKILL mid-write: the spool loses nothing committed."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from telemetry.agent.clock import FakeClock
from telemetry.agent.schema import read_body
from telemetry.agent.spool import Spool

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import os, sys
from telemetry.agent.clock import RealClock
from telemetry.agent.schema import build_body
from telemetry.agent.spool import Spool

spool = Spool(sys.argv[1], clock=RealClock())
i = 0
while True:
    def build(batch_id, extra, i=i):
        # ~200 KB of incompressible data: each commit takes long enough to be interrupted.
        return build_body(batch_id=batch_id, sealed_at=0.0, agent={}, gpus=[],
                          windows=[{"n": i, "pad": os.urandom(100_000).hex()}], events=extra)
    spool.seal(build, n_windows=1, n_events=0)
    print(i, flush=True)
    i += 1
"""


def kill_while_writing(path: Path, after: int) -> int:
    """Start the writer, SIGKILL it after `after` commits; returns the last commit it saw."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    last = -1
    for line in proc.stdout:
        last = int(line)
        if last >= after:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    return last


def test_sigkill_mid_write_keeps_every_committed_batch(tmp_path):
    path = tmp_path / "spool.db"
    acknowledged = []
    for after in (3, 6, 9):  # three writers in a row, each killed while writing
        acknowledged.append(kill_while_writing(path, after))
        spool = Spool(str(path), clock=FakeClock(0.0))
        with spool._lock:
            assert spool._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        spool.close()
    spool = Spool(str(path), clock=FakeClock(0.0))
    numbers = []
    while (batch := spool.oldest()) is not None:
        numbers.append(read_body(batch.body)["windows"][0]["n"])
        spool.delete(batch.batch_id)
    spool.close()
    # Each writer numbered its batches from 0: the spool holds 0..k for each, in order, with
    # k at least what the writer acknowledged (a commit may land just before the kill).
    runs: list[list[int]] = []
    for n in numbers:
        if n == 0:
            runs.append([])
        runs[-1].append(n)
    assert [run == list(range(len(run))) for run in runs] == [True, True, True]
    assert all(run[-1] >= ack for run, ack in zip(runs, acknowledged, strict=True))
    assert all(run[-1] <= ack + 1 for run, ack in zip(runs, acknowledged, strict=True))
    assert not list(tmp_path.glob("spool.db.corrupt-*"))  # SQLite itself never tore

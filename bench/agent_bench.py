"""Agent benchmarks, each next to a baseline measured in the same run.

    python -m bench.agent_bench [--cycles 1500] [--batches 1000]

1. CPU time per 5-s sampling cycle of an 8 x H100 node (time.process_time, all threads),
   including the four 1-s event-poll ticks between samples and the minute's batch sealing,
   with utilization from the driver's sample buffer (~25 new samples per GPU and kind each
   cycle) and, for comparison, from instantaneous reads; against the bare cost of the same
   fake NVML calls made directly in a loop (the fake's own cost is in both).
2. Spool replay rate (batches/s) to a loopback HTTP server answering 202, against raw SQLite
   insert + per-row delete with the spool's settings (WAL, synchronous=FULL) and against bare
   HTTP POSTs of the same bodies without the spool.
"""

from __future__ import annotations

import argparse
import http.client
import sqlite3
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from telemetry.agent.agent import Agent, AgentConfig
from telemetry.agent.clock import FakeClock, RealClock
from telemetry.agent.credentials import Credentials
from telemetry.agent.fake import load_scenario
from telemetry.agent.schema import build_body, read_body
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader

START = 1_795_255_200.0  # 2026-11-21T10:00:00Z


def _fake_calls(fake: Any, handles: list[Any], last_seen: list[int]) -> None:
    """The NVML calls one buffered sample makes on each GPU, with nothing around them."""
    nv = fake
    for i, h in enumerate(handles):
        seen = last_seen[i]
        for kind in (nv.NVML_GPU_UTILIZATION_SAMPLES, nv.NVML_MEMORY_UTILIZATION_SAMPLES):
            _, samples = nv.nvmlDeviceGetSamples(h, kind, seen)
            last_seen[i] = samples[-1].timeStamp
        nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        nv.nvmlDeviceGetPowerUsage(h)
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
        nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        nv.nvmlDeviceGetTotalEccErrors(h, 0, 1)
        nv.nvmlDeviceGetTotalEccErrors(h, 1, 1)
        nv.nvmlDeviceGetRemappedRows(h)
        nv.nvmlDeviceGetPcieReplayCounter(h)
        nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])


def _agent_cpu(cycles: int, tmp: Path, *, buffer: bool) -> tuple[float, Any, FakeClock]:
    """CPU seconds per 5-s cycle of the agent, and the fake and clock it ran on."""
    scenario = load_scenario("h100x8")
    clock = FakeClock(START)
    fake = scenario.build(clock)
    spool = Spool(str(tmp / f"sampling-{buffer}.db"), clock=clock)
    config = AgentConfig(hostname="bench", util_buffer=buffer)
    agent = Agent(nvml=fake, clock=clock, spool=spool, config=config)
    for _ in range(60):  # warm up: init, enumeration, first windows
        agent.tick()
        clock.advance(1)
    t0 = time.process_time()
    for _ in range(cycles * 5):  # one tick a second, as in production
        agent.tick()
        clock.advance(1)
    agent_cpu = (time.process_time() - t0) / cycles
    agent.shutdown()
    spool.close()
    return agent_cpu, fake, clock


def bench_sampling(cycles: int, tmp: Path) -> dict[str, float]:
    instant_cpu, _, _ = _agent_cpu(cycles, tmp, buffer=False)
    agent_cpu, fake, clock = _agent_cpu(cycles, tmp, buffer=True)

    fake.nvmlInit()
    handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(fake.nvmlDeviceGetCount())]
    last_seen = [0] * len(handles)
    _fake_calls(fake, handles, last_seen)  # from here on, ~25 new samples a kind per cycle
    clock.advance(5)
    t0 = time.process_time()
    for _ in range(cycles):
        _fake_calls(fake, handles, last_seen)
        clock.advance(5)
    bare_cpu = (time.process_time() - t0) / cycles
    return {
        "agent_ms": agent_cpu * 1000,
        "instant_ms": instant_cpu * 1000,
        "bare_ms": bare_cpu * 1000,
    }


class _Accept(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _realistic_body(tmp: Path) -> dict[str, Any]:
    """One minute's batch of an 8-GPU node, as the agent builds it."""
    scenario = load_scenario("h100x8")
    clock = FakeClock(START)
    spool = Spool(str(tmp / "source.db"), clock=clock)
    agent = Agent(nvml=scenario.build(clock), clock=clock, spool=spool)
    while clock.now() < START + 121:
        clock.set(max(agent.tick(), clock.now()))
    batch = spool.oldest()
    while batch is not None and not read_body(batch.body)["windows"]:
        spool.delete(batch.batch_id)
        batch = spool.oldest()
    assert batch is not None
    doc = read_body(batch.body)
    agent.shutdown()
    spool.close()
    return doc


def bench_replay(batches: int, tmp: Path) -> dict[str, float]:
    doc = _realistic_body(tmp)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    clock = RealClock()
    spool = Spool(str(tmp / "replay.db"), clock=clock)

    def build(batch_id: str, extra: list[dict[str, Any]]) -> bytes:
        return build_body(
            batch_id=batch_id,
            sealed_at=START,
            agent=doc["agent"],
            gpus=doc["gpus"],
            windows=doc["windows"],
            events=extra,
        )

    for _ in range(batches):
        spool.seal(build, n_windows=len(doc["windows"]), n_events=0)
    sample = spool.oldest()
    assert sample is not None
    body = sample.body
    transport = HttpTransport(url)
    uploader = Uploader(
        spool=spool,
        transport=transport,
        credentials=lambda: Credentials("bench-node", "bench-key"),
        clock=clock,
    )
    t0 = time.perf_counter()
    while spool.count():
        uploader.pump()
    replay = batches / (time.perf_counter() - t0)
    spool.close()

    # Baseline 1: what SQLite alone costs for the same rows (insert, then delete one by one).
    conn = sqlite3.connect(str(tmp / "raw.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE b (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, body BLOB)")
    t0 = time.perf_counter()
    for i in range(batches):
        conn.execute("INSERT INTO b (id, body) VALUES (?, ?)", (str(i), body))
    insert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(batches):
        conn.execute("DELETE FROM b WHERE id = ?", (str(i),))
    delete_s = time.perf_counter() - t0
    conn.close()

    # Baseline 2: the same POSTs on one kept-alive connection, no spool, no signing.
    conn_http = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
    t0 = time.perf_counter()
    for _ in range(batches):
        conn_http.request("POST", "/api/v1/telemetry/batches", body=body)
        conn_http.getresponse().read()
    http_rate = batches / (time.perf_counter() - t0)
    conn_http.close()
    transport.close()
    server.shutdown()
    server.server_close()
    thread.join()
    return {
        "replay_per_s": replay,
        "sqlite_insert_per_s": batches / insert_s,
        "sqlite_delete_per_s": batches / delete_s,
        "sqlite_both_per_s": batches / (insert_s + delete_s),
        "http_only_per_s": http_rate,
        "body_bytes": float(len(body)),
        "windows": float(len(doc["windows"])),
    }


def main(argv: list[str] | None = None) -> None:
    """Runs with defaults under `python -m bench`; `python -m bench.agent_bench --cycles N`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1500)
    parser.add_argument("--batches", type=int, default=1000)
    args = parser.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        s = bench_sampling(args.cycles, tmp)
        r = bench_replay(args.batches, tmp)
    print(f"Sampling, 8 x H100 (fake NVML), {args.cycles} cycles of 5 s:")
    print(f"  agent CPU per cycle (sample + 4 event ticks + sealing) {s['agent_ms']:8.3f} ms")
    print(f"    (the same with instantaneous utilization reads       {s['instant_ms']:8.3f} ms)")
    print(f"  baseline: the same fake NVML calls, bare              {s['bare_ms']:8.3f} ms")
    overhead = s["agent_ms"] / s["bare_ms"]
    print(f"  agent overhead over the bare calls                    {overhead:8.1f} x")
    print(f"  agent CPU share of one core at 5-s cycles             {s['agent_ms'] / 50:8.3f} %")
    print(
        f"Spool replay, {args.batches} batches of {r['windows']:.0f} windows "
        f"({r['body_bytes']:.0f} B gzipped), loopback server answering 202:"
    )
    print(f"  agent replay (verify, sign, POST, delete)  {r['replay_per_s']:9.0f} batches/s")
    print(f"  baseline: raw SQLite insert + delete       {r['sqlite_both_per_s']:9.0f} rows/s")
    print(f"    (insert {r['sqlite_insert_per_s']:.0f}/s, delete {r['sqlite_delete_per_s']:.0f}/s)")
    print(f"  baseline: bare HTTP POST, no spool         {r['http_only_per_s']:9.0f} requests/s")


if __name__ == "__main__":
    main(sys.argv[1:])

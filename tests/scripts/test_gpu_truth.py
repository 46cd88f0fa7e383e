"""``scripts/gpu_truth.py``: the ground-truth check for the agent's utilization and energy.

The analysis is held to hand-made intervals, windows and counter reads with figures worked out
by hand; the load driver to a fake clock; the receiver to a batch the real agent sealed and
delivered; and the whole script to its ``--fake`` run (the real agent against the fake NVML).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from telemetry.agent import __version__
from telemetry.agent.agent import Agent, AgentConfig
from telemetry.agent.clock import FakeClock, RealClock
from telemetry.agent.credentials import Credentials, enrol
from telemetry.agent.fake import FakeGpu, FakeNvml, load_scenario
from telemetry.agent.fake.models import model
from telemetry.agent.signing import sign
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader
from telemetry.agent.windows import window_start
from tests.agent.helpers import spooled_docs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_truth.py"
# Recordings of real GPUs kept as fixtures (``tests/agent/fixtures/<model>-truth``).
KEPT = sorted((ROOT / "tests" / "agent" / "fixtures").glob("*-truth"))
M = 1_795_255_200  # 2026-11-21T10:00:00Z, a minute boundary


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_truth", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_truth"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gt = _load_script()


def iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- truth from intervals --------------------------------------------------------------------------


def test_busy_share_counts_only_the_overlap_with_the_span():
    intervals = [(M - 1.0, M + 1.5), (M + 10.0, M + 10.25), (M + 59.0, M + 61.0)]
    assert gt.overlap_seconds(intervals, M, M + 60) == 1.5 + 0.25 + 1.0
    assert gt.true_busy_pct(intervals, M, M + 60) == 100 * 2.75 / 60
    assert gt.true_busy_pct(intervals, M + 60, M + 120) == 100 * 1.0 / 60
    assert gt.true_busy_pct([], M, M + 60) == 0.0
    with pytest.raises(ValueError, match="empty span"):
        gt.true_busy_pct(intervals, M, M)


def test_the_truth_log_dates_edges_by_its_clock_and_counts_an_open_interval_up_to_now():
    clock = FakeClock(M + 1.0)
    log = gt.TruthLog()
    assert log.begin("5/5", clock) == M + 1.0
    clock.set(M + 6.0)
    assert log.end(clock) == M + 6.0
    clock.set(M + 11.0)
    log.begin("5/5", clock)
    assert log.spans() == [(M + 1.0, M + 6.0)]
    us = 1_000_000
    # [M, M+60) as known at M+13.5: 5 s closed, 2.5 s of the open interval, nothing after now.
    assert log.busy_us(M * us, (M + 60) * us, (M + 13) * us + us // 2) == 7_500_000
    assert log.busy_us((M + 3) * us, (M + 4) * us, (M + 13) * us) == 1_000_000
    assert log.busy_us((M + 6) * us, (M + 11) * us, (M + 13) * us) == 0
    clock.set(M + 16.0)
    log.end(clock)
    assert log.intervals == [("5/5", M + 1.0, M + 6.0), ("5/5", M + 11.0, M + 16.0)]
    load = gt.TruthLoad(log, clock)
    assert load.busy_us((M + 5) * us, (M + 12) * us) == 2_000_000
    assert load.busy_us((M + 12) * us, (M + 5) * us) == 0


def test_the_counter_is_interpolated_between_the_reads_either_side():
    reads = [(100.0, 1000), (100.1, 1070), (100.3, 1070), (100.4, 1500), (100.5, 20)]
    assert gt.counter_at(reads, 100.0) == 1000.0
    assert gt.counter_at(reads, 100.05) == pytest.approx(1035.0, abs=1e-9)
    assert gt.counter_at(reads, 100.2) == 1070.0
    assert gt.counter_at(reads, 100.375) == pytest.approx(1392.5, abs=1e-9)
    assert gt.counter_at(reads, 100.4) == 1500.0
    assert gt.counter_at(reads, 100.45) is None  # the counter went backwards: a reload
    assert gt.counter_at(reads, 99.99) is None
    assert gt.counter_at(reads, 100.51) is None
    assert gt.counter_at([], 100.0) is None


# -- the plan and the load driver ------------------------------------------------------------------


def test_loads_fill_whole_minutes_back_to_back():
    loads = [gt.LOADS["0.5/0.5"], gt.LOADS["random"]]
    plan = gt.plan_loads(loads, M, 2)
    assert [(p.load.name, p.start, p.end) for p in plan] == [
        ("0.5/0.5", M, M + 120),
        ("random", M + 120, M + 240),
    ]
    assert gt.first_minute_after(M - 30.5, 20) == M
    assert gt.first_minute_after(M - 20, 20) == M
    assert gt.first_minute_after(M - 19.9, 20) == M + 60
    with pytest.raises(ValueError, match="minute boundary"):
        gt.plan_loads(loads, M + 1, 2)
    with pytest.raises(ValueError, match="whole minute"):
        gt.plan_loads(loads, M, 0)


def _driven(names: list[str], minutes: int = 1) -> tuple[Any, FakeClock, FakeNvml]:
    """The load driver on a fake clock, its card the fake NVML's as in --fake mode."""
    clock = FakeClock(M - 7)
    truth = gt.TruthLog()
    gpu = FakeGpu(
        slot=0, model=model("H100-SXM5-80GB"), bus=0x18, seed=1, load=gt.TruthLoad(truth, clock)
    )
    nvml = FakeNvml(clock, [gpu])
    plan = gt.plan_loads([gt.LOADS[n] for n in names], M, minutes)
    gt.drive(plan, gt.FakeCardBackend(), clock, truth, seed=18)
    return truth, clock, nvml


def test_fixed_loads_keep_their_phase_from_the_minute_boundary():
    truth, _, _ = _driven(["2.5/2.5", "0.6/1.4", "5/5"])
    spans = truth.spans()
    assert [s for s in spans if s[0] < M + 60] == [
        (M + 5.0 * k, M + 5.0 * k + 2.5) for k in range(12)
    ]
    second = [s for s in spans if M + 60 <= s[0] < M + 120]
    assert len(second) == 30
    assert second[0] == (M + 60.0, M + 60.6)
    assert second[-1] == pytest.approx((M + 118.0, M + 118.6))
    assert [s for s in spans if s[0] >= M + 120] == [
        (M + 120.0 + 10 * k, M + 125.0 + 10 * k) for k in range(6)
    ]
    assert gt.true_busy_pct(spans, M, M + 60) == 50.0
    assert gt.true_busy_pct(spans, M + 60, M + 120) == pytest.approx(30.0, abs=1e-4)  # float sums
    assert gt.true_busy_pct(spans, M + 120, M + 180) == 50.0


def test_the_random_load_draws_phases_within_bounds_and_ends_on_its_minute():
    truth, _, _ = _driven(["random"], minutes=2)
    spans = truth.spans()
    again, _, _ = _driven(["random"], minutes=2)
    assert again.spans() == spans  # the seed makes it reproducible
    assert spans[0][0] == M
    assert spans[-1][1] <= M + 120
    assert all(0.1 <= e - s <= 3.0 for s, e in spans[:-1])
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    assert all(0.1 <= g <= 3.0 + 1e-9 for g in gaps)
    assert len(spans) > 120 / 6.0  # phases average 1.55 s each: some 39 periods in 2 min


def test_the_fake_card_is_busy_exactly_when_the_driver_logged_it():
    _, clock, nvml = _driven(["5/5"])
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    # The driver's samples of the load's last 20 s (the ring holds 24 s): 200-ms periods, busy
    # 5 s of every 10; the few periods that straddle an edge report their busy share.
    _, samples = nvml.nvmlDeviceGetSamples(handle, 1, (M + 40) * 1_000_000)
    assert clock.now() == M + 60
    assert len(samples) == 100
    values = [s.sampleValue.uiVal for s in samples]
    assert sum(v not in (0, 100) for v in values) <= 4
    assert abs(sum(values) / len(values) - 50.0) <= 0.5
    # The energy counter is the integral of the load: idle power, plus the swing while busy.
    gpu = nvml.gpus[0]
    energy = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    idle, peak = gpu.model.power_idle_mw, gpu.model.power_max_mw
    assert energy == int(idle * 67 + (peak - idle) * 30)  # 67 s since M - 7, 30 s busy


class _Gpu:
    """Stands in for a CUDA device under PyTorch's or CuPy's API (neither is installed here):
    a matrix product is queued, an event completes the products queued before it and takes
    10 ms of the clock per product, as a real synchronize() would wait."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.log: list[str] = []
        self.queued = 0  # products launched
        self.done = 0  # products the host has waited for

    def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
        self.log.append("mm")
        self.queued += 1
        return out

    def event(self) -> Any:
        gpu = self
        outstanding = 0

        class Event:
            def record(self) -> None:
                nonlocal outstanding
                outstanding = gpu.queued
                gpu.log.append("record")

            def synchronize(self) -> None:
                # The products still queued after this event's: the GPU has work meanwhile.
                gpu.log.append(f"wait:{gpu.queued - outstanding}")
                gpu.clock.advance(0.01 * (outstanding - gpu.done))
                gpu.done = outstanding

        return Event()

    def synchronize(self) -> None:
        self.log.append("sync")
        self.clock.advance(0.01 * (self.queued - self.done))
        self.done = self.queued

    def module(self, name: str) -> Any:
        mod: Any = types.ModuleType(name)
        mod.__version__ = "0.0-stub"
        mod.bfloat16 = mod.float32 = "dtype"
        mod.randn = lambda *shape, **kw: object()
        mod.random = types.SimpleNamespace(standard_normal=lambda shape, dtype: object())
        mod.empty_like = lambda a: object()
        mod.matmul = self.matmul
        if name == "torch":
            mod.cuda = types.SimpleNamespace(synchronize=self.synchronize, Event=self.event)
        else:
            device = types.SimpleNamespace(synchronize=self.synchronize)
            mod.cuda = types.SimpleNamespace(Device=lambda: device, Event=self.event)
        return mod


def test_a_busy_phase_keeps_products_queued_until_the_first_wait_past_its_end(monkeypatch):
    clock = FakeClock(M)
    gpu = _Gpu(clock)
    monkeypatch.setitem(sys.modules, "torch", gpu.module("torch"))
    backend = gt.MatmulBackend("auto", size=64)
    assert (backend.name, backend.version) == ("torch", "0.0-stub")
    assert backend.batch >= 1 and backend.matmul_s > 0
    backend.batch = 2
    gpu.log.clear()
    start = clock.now()
    backend.busy_until(clock, start + 0.05)
    # Each wait leaves the next batch of two queued; the waits end batches at +20, +40 and
    # +60 ms (two products a batch, 10 ms each): the third is past the end, then the queue
    # drains (+80 ms).
    batch = ["mm", "mm", "record"]
    assert gpu.log == [*batch, *batch, "wait:2", *batch, "wait:2", *batch, "wait:2", "sync"]
    assert clock.now() == pytest.approx(start + 0.08)


def test_cupy_serves_where_pytorch_does_not_import(monkeypatch):
    gpu = _Gpu(FakeClock(M))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "cupy", gpu.module("cupy"))
    assert gt.MatmulBackend("auto", size=64).name == "cupy"
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeError, match=r"no GPU through PyTorch or CuPy: torch: .*; cupy: "):
        gt.MatmulBackend("auto", size=64)
    with pytest.raises(RuntimeError, match=r"no GPU through PyTorch or CuPy: cupy: "):
        gt.MatmulBackend("cupy", size=64)


def test_unknown_loads_or_no_recording_directory_are_refused_before_anything_runs(tmp_path):
    assert gt.main(["--fake", "--loads", "0.5/0.5,1/1", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    assert gt.main(["--fake"]) == 2
    # A run that fails (here: the fake node cannot be built) says so and writes nothing.
    assert gt.main(["--fake", "--fake-model", "H900", "--out", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "y").exists()


# -- windows against the truth ---------------------------------------------------------------------

# Busy seconds per window, by hand: [M-20, M) 1 + 1 = 2 (of the 20 observed); [M, M+60) 2 + 15 + 10
# = 27; [M+60, M+120) 10 + 11 + 1 = 22; [M+120, M+127) 3 (of the 7 observed).
INTERVALS = [
    (M - 10.0, M - 9.0),
    (M - 1.0, M + 2.0),
    (M + 10.0, M + 25.0),
    (M + 50.0, M + 70.0),
    (M + 100.0, M + 111.0),
    (M + 119.0, M + 123.0),
]
# The counter at M: 4000 (between 2000 and 6000); at M+60: 15500; at M+120: 30500.
READS = [
    (M - 30.0, 0),
    (M - 10.0, 2000),
    (M + 10.0, 6000),
    (M + 55.0, 15000),
    (M + 65.0, 16000),
    (M + 118.0, 30000),
    (M + 122.0, 31000),
]
PLAN = gt.plan_loads([gt.LOADS["2.5/2.5"], gt.LOADS["5/5"]], M, 1)


def gauge(avg: float) -> dict[str, Any]:
    return {"min": 0, "avg": avg, "max": 100}


def window(ts: int, avg: float | None, energy: int | None, **extra: Any) -> dict[str, Any]:
    doc = {
        "gpu_uuid": "GPU-00000000-0000-0000-0000-000000000001",
        "window_start": iso(ts),
        "samples_ok": 12,
        "samples_expected": 12,
        "state": "up",
        "state_reason": None,
        "util_gpu": None if avg is None else gauge(avg),
        "energy_mj": energy,
    }
    return doc | extra


def v2(ts: int, avg: float | None, energy: int | None, lo: int, hi: int) -> dict[str, Any]:
    method = None if avg is None else "buffer"
    return window(ts, avg, energy, observed_from=lo, observed_to=hi, util_method=method)


WINDOWS_V2 = [
    v2(M - 60, 12.0, 4_100, 40, 60),
    v2(M, 46.5, 15_400, 0, 60),
    v2(M + 60, 34.0, 30_700, 0, 60),
    v2(M + 120, 40.0, 31_000, 0, 7),
]


def test_schema_2_windows_are_compared_over_their_observed_span():
    rows = gt.window_rows(WINDOWS_V2[::-1], INTERVALS, READS, PLAN, interval_s=5.0)
    assert [dataclasses.astuple(r) for r in rows] == [
        # start, load, full, from, to, method, ok, expected, truth, avg, min, max, Δ,
        # agent energy, reference energy, Δ %
        (iso(M - 60), None, False, 40, 60, "buffer", 12, 12, 10.0, 12.0, 0, 100, 2.0,
         None, None, None),
        (iso(M), "2.5/2.5", True, 0, 60, "buffer", 12, 12, 45.0, 46.5, 0, 100, 1.5,
         11_300, 11_500, -1.74),
        (iso(M + 60), "5/5", True, 0, 60, "buffer", 12, 12, 36.667, 34.0, 0, 100, -2.667,
         15_300, 15_000, 2.0),
        (iso(M + 120), None, False, 0, 7, "buffer", 12, 12, 42.857, 40.0, 0, 100, -2.857,
         300, None, None),
    ]  # fmt: skip


def test_schema_1_windows_claim_the_minute_and_are_full_with_every_slot():
    windows = [
        window(M, 46.5, 15_400),
        window(M + 60, 34.0, 14_000, samples_ok=7, samples_expected=7),  # counter reset
        window(M + 120, None, None),
    ]
    rows = gt.window_rows(windows, INTERVALS, READS, PLAN, interval_s=5.0)
    assert [(r.full, r.observed_from, r.observed_to, r.util_method) for r in rows] == [
        (True, 0, 60, "instant"),
        (False, 0, 60, "instant"),
        (True, 0, 60, None),
    ]
    assert [r.truth_pct for r in rows] == [45.0, 36.667, 5.0]
    assert [r.delta_pts for r in rows] == [1.5, -2.667, None]
    assert [r.energy_agent_mj for r in rows] == [None, None, None]  # no minute before; a reset
    assert [r.energy_ref_mj for r in rows] == [11_500, 15_000, None]


def test_the_verdict_needs_every_planned_minute_within_the_tolerance():
    rows = gt.window_rows(WINDOWS_V2, INTERVALS, READS, PLAN, interval_s=5.0)
    verdict = gt.judge(rows, PLAN, 2.0)
    assert not verdict.ok
    assert verdict.judged_windows == 2
    assert verdict.failures == [f"5/5 {iso(M + 60)}: agent 34.000 vs truth 36.667 (-2.667 points)"]
    assert [(s.load, s.truth_pct, s.util_avg, s.worst_delta_pts, s.ok) for s in verdict.loads] == [
        ("2.5/2.5", 45.0, 46.5, 1.5, True),
        ("5/5", 36.667, 34.0, -2.667, False),
    ]
    assert verdict.line().startswith("FAIL: not every full window within ±2 points")

    passing = gt.judge(rows, PLAN, 2.667)
    assert passing.ok
    assert passing.line() == (
        "PASS: every full window within ±2.667 points of the truth for every load "
        "(2 windows; largest difference 2.667 points)"
    )


def test_a_missing_or_partial_minute_or_no_utilization_fails_the_verdict():
    plan = gt.plan_loads([gt.LOADS["2.5/2.5"]], M, 2)
    windows = [v2(M, 46.5, 15_400, 0, 60), v2(M + 60, 34.0, 30_700, 5, 60)]
    verdict = gt.judge(gt.window_rows(windows, INTERVALS, READS, plan, interval_s=5.0), plan)
    assert verdict.failures == ["2.5/2.5: 1 of 2 minutes full"]
    assert verdict.loads[0].worst_delta_pts == 1.5

    windows = [v2(M, 46.5, 15_400, 0, 60), v2(M + 60, None, 30_700, 0, 60)]
    verdict = gt.judge(gt.window_rows(windows, INTERVALS, READS, plan, interval_s=5.0), plan)
    assert verdict.failures == [f"2.5/2.5 {iso(M + 60)}: no utilization"]


def test_the_table_shows_every_window_and_marks_the_partial_ones():
    rows = gt.window_rows(WINDOWS_V2, INTERVALS, READS, PLAN, interval_s=5.0)
    lines = gt.render(rows, gt.judge(rows, PLAN)).splitlines()
    assert lines[3] == (
        f"{iso(M)} 2.5/2.5      0-60 buffer    45.000   46.500   +1.500       11.3       11.5"
        "  -1.74"
    )
    assert lines[2].endswith("(partial: not judged)")
    assert lines[-2] == (
        "energy: 2 full windows, agent vs the script's own counter reads within 2.00 % "
        "(informational; the goal is utilization)"
    )


# -- the receiver ----------------------------------------------------------------------------------


def test_the_receiver_enrols_the_agent_and_keeps_its_signed_batches(tmp_path):
    start = window_start(time.time()) - 180  # windows of the recent past, as a live agent's
    clock = FakeClock(start)
    fake = load_scenario("h100x8").build(clock)
    spool = Spool(str(tmp_path / "spool.db"), clock=clock)
    agent = Agent(nvml=fake, clock=clock, spool=spool, config=AgentConfig(hostname="node-a"))
    while clock.now() < start + 65:
        due = agent.tick()
        clock.set(max(due, clock.now() + 0.001))
    agent.shutdown()
    sealed = spooled_docs(str(tmp_path / "spool.db"))
    # Eight GPUs: the whole minute, and the 5 s sealed at shutdown.
    assert sum(len(d["windows"]) for d in sealed) == 16

    with gt.Receiver() as receiver:
        transport = HttpTransport(receiver.url, timeout_s=5)
        token = receiver.token
        creds = enrol(
            transport, bootstrap_token=token, hostname="node-a", gpus=[], agent_version=__version__
        )
        assert creds == Credentials(receiver.node_id, receiver.node_key)
        uploader = Uploader(
            spool=spool, transport=transport, credentials=lambda: creds, clock=RealClock()
        )
        for _ in range(100):
            if not spool.count():
                break
            uploader.pump()
        assert spool.count() == 0
        assert receiver.batches == sealed

        # What the server refuses, the receiver refuses too.
        again = transport.post(
            "/api/v1/agents/enrol", json.dumps({"bootstrap_token": token}).encode(), {}
        )
        assert again.status == 403  # the token is spent
        body = b"\x1f\x8b not a batch"
        now = int(time.time())
        headers = {
            "Idempotency-Key": sealed[0]["batch_id"],
            "X-Steward-Node": receiver.node_id,
            "X-Steward-Timestamp": str(now),
            "X-Steward-Signature": sign(
                b"another key", "POST", gt.BATCHES_PATH, now, sealed[0]["batch_id"], body
            ),
        }
        assert transport.post(gt.BATCHES_PATH, body, headers).status == 401
        headers["X-Steward-Signature"] = sign(
            receiver.node_key.encode(), "POST", gt.BATCHES_PATH, now, sealed[0]["batch_id"], body
        )
        assert transport.post(gt.BATCHES_PATH, body, headers).status == 200  # a replay
        transport.close()
    assert receiver.answers == [(gt.ENROL_PATH, 201)] + [(gt.BATCHES_PATH, 202)] * len(sealed) + [
        (gt.ENROL_PATH, 403),
        (gt.BATCHES_PATH, 401),
        (gt.BATCHES_PATH, 200),
    ]
    spool.close()


# -- the whole script without a GPU ----------------------------------------------------------------


def test_fake_mode_runs_the_real_agent_against_the_driven_card(tmp_path):
    """The agent reads the fake card's driver samples, which follow the logged load exactly:
    every full window within ±2 points, as the goal asks of a real GPU. Three loads, one
    minute each, at 20× (about 10 s): the two the instantaneous reads got most wrong, and
    the random one."""
    out = tmp_path / "rec"
    loads = ["2.5/2.5", "0.6/1.4", "random"]
    argv = ["--fake", "--speed", "20", "--minutes", "1", "--loads", ",".join(loads)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json.loads((out / "host.json").read_text())
    table = json.loads((out / "windows.json").read_text())
    truth = json.loads((out / "truth.json").read_text())
    batches = [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]
    assert table["verdict"]["ok"]
    assert table["verdict"]["line"].startswith("PASS: every full window within ±2 points")
    assert host["mode"] == "fake"
    assert host["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert host["agent_rc"] == 0
    h100 = model("H100-SXM5-80GB")  # the driver's buffer as the fake models it, read back
    assert host["driver_buffer_samples"] == h100.util_buffer_capacity
    assert host["driver_sample_period_us"] == h100.util_period_us
    assert host["batches"] == len(batches) > 0
    assert host["receiver_answers"] == {
        "/api/v1/agents/enrol 201": 1,
        "/api/v1/telemetry/batches 202": len(batches),
    }
    # Every planned minute came back as a window of the driven card, in the plan's order.
    starts = [load["start"] for load in truth["loads"]]
    assert [load["load"] for load in truth["loads"]] == loads
    rows = {r["window_start"]: r for r in table["rows"]}
    assert [rows[s]["load"] for s in starts] == loads
    assert [(rows[s]["full"], rows[s]["util_method"]) for s in starts] == [(True, "buffer")] * 3
    windows = {w["window_start"]: w for b in batches for w in b["windows"]}
    assert set(rows) == set(windows)
    spans = [tuple(s) for load in truth["loads"] for s in load["busy"]]
    for load in truth["loads"]:
        lo = gt.parse_rfc3339(load["start"])
        assert load["busy"] and all(lo <= s < e for s, e in load["busy"])
        row, w = rows[load["start"]], windows[load["start"]]
        assert row["util_avg"] == (w["util_gpu"] or {}).get("avg")
        assert row["truth_pct"] == round(gt.true_busy_pct(spans, lo, lo + 60), 3)
        assert row["energy_ref_mj"] > 0
    assert host["energy_reads"] == len((out / "energy.jsonl").read_text().splitlines())
    assert table["verdict"]["line"] in proc.stdout
    assert f"recording: {out}" in proc.stdout
    assert (out / "README.md").read_text().startswith("# Ground truth: NVIDIA H100 80GB HBM3")

    # The recording alone gives the same table again: a kept fixture is asserted this way.
    rows_again, verdict = gt.analyse(gt.read_recording(out))
    assert [dataclasses.asdict(r) for r in rows_again] == table["rows"]
    assert verdict.line() == table["verdict"]["line"]


@pytest.mark.parametrize("recording", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_recording_gives_its_table_and_its_stated_result_again(recording):
    rows, verdict = gt.analyse(gt.read_recording(recording))
    table = json.loads((recording / "windows.json").read_text())
    assert [dataclasses.asdict(r) for r in rows] == table["rows"]
    assert verdict.line() == table["verdict"]["line"]
    assert f"Result: {verdict.line()}" in (recording / "README.md").read_text()

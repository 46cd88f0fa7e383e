"""Ground truth for the agent: drive known loads on one GPU and compare what the agent reports.

    python3 scripts/gpu_truth.py --out DIR [--gpu 0] [--minutes 2] [--loads 0.5/0.5,2.5/2.5]
    python3 scripts/gpu_truth.py --fake --speed 20 --out DIR      # no GPU: the fake NVML

On a GPU node with PyTorch or CuPy (whichever imports), nvidia-ml-py and this checkout (nothing
else: no Django, no database), it:

1. drives the loads of issue 18's table on one GPU, each for ``--minutes`` whole UTC minutes,
   back to back from a minute boundary: busy phases are back-to-back matrix products from the
   first launch to the ``synchronize()`` that returns at or after the phase's end, idle phases
   are sleeps; phases are scheduled on absolute times, so a periodic load keeps its phase. The
   busy intervals it logs are the ground truth;
2. runs the real agent at the same time: ``telemetry.agent.cli.main`` (what ``steward-agent``
   runs), in this process, on real ``pynvml``, at ``--interval`` 5 s, enrolling with and
   delivering to a receiver this script serves on 127.0.0.1 (enrolment and the batch endpoint
   of docs/agent.md §5: signature checked, gunzipped, kept);
3. reads the GPU's energy counter itself every ``--energy-every`` (0.1 s) and interpolates it
   to the minute boundaries: an integral independent of the agent;
4. prints, per window, the true busy share vs the agent's ``util_gpu.avg`` (with its
   ``util_method`` and observed span) and the window's energy (counter delta) vs the script's
   own, then a verdict against the goal: every full window within ±``--tolerance`` (2) points
   of the truth, for every load;
5. writes a recording into ``--out`` in the style of ``tests/agent/fixtures/h100``:
   ``batches.jsonl`` (each batch the agent delivered), ``truth.json`` (the plan and the busy
   intervals), ``energy.jsonl`` (the script's counter reads), ``windows.json`` (the table and
   the verdict, computed from the files beside it), ``host.json`` (driver, GPU, versions) and a
   ``README.md`` to complete.

``--fake`` runs the same pipeline without a GPU: ``cli.main``'s own ``--fake`` path (a clock
``--speed`` times faster than real time, the fake NVML of ``telemetry.agent.fake``) with one
fake card whose load is the driver's truth log itself (``TruthLoad``): its driver samples,
instantaneous reads, power and energy follow the logged busy intervals. ``--analyse DIR``
prints the table and verdict of a recording again (a kept fixture, on any machine).

Exit status: 0 the goal is met, 1 it is not, 2 the run itself failed (the agent, the GPU, the
arguments).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime as dt
import gzip
import hmac
import importlib
import itertools
import json
import logging
import math
import os
import platform
import random
import secrets
import signal
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from telemetry.agent import __version__ as AGENT_VERSION  # noqa: E402 - after the path is set
from telemetry.agent.clock import Clock, RealClock  # noqa: E402
from telemetry.agent.signing import verify  # noqa: E402
from telemetry.agent.timefmt import parse_rfc3339, rfc3339_seconds  # noqa: E402

if TYPE_CHECKING:
    from telemetry.agent.fake import Scenario

log = logging.getLogger("gpu_truth")

WINDOW_S = 60
US = 1_000_000
ENROL_PATH = "/api/v1/agents/enrol"
BATCHES_PATH = "/api/v1/telemetry/batches"
TOLERANCE_PTS = 2.0
TRUTH_CLOCK = "unix seconds; busy = first launch to the synchronize() that ended the phase"

Interval = tuple[float, float]


# -- the loads -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    """A busy/idle pattern: each phase's length drawn uniformly from its (low, high) seconds;
    a fixed pattern has low == high."""

    name: str
    busy: tuple[float, float]
    idle: tuple[float, float]

    def phases(self, rng: random.Random) -> Iterator[tuple[float, float]]:
        """(busy seconds, idle seconds), forever."""
        while True:
            yield self._draw(self.busy, rng), self._draw(self.idle, rng)

    @staticmethod
    def _draw(bounds: tuple[float, float], rng: random.Random) -> float:
        low, high = bounds
        return low if low == high else rng.uniform(low, high)


# Issue 18's table (periods of 1, 5 and 2 s, and random phases), plus a 10-s period: the
# periods its fake scenarios also cover.
LOADS: dict[str, Load] = {
    load.name: load
    for load in (
        Load("0.5/0.5", (0.5, 0.5), (0.5, 0.5)),
        Load("2.5/2.5", (2.5, 2.5), (2.5, 2.5)),
        Load("0.6/1.4", (0.6, 0.6), (1.4, 1.4)),
        Load("random", (0.1, 3.0), (0.1, 3.0)),
        Load("5/5", (5.0, 5.0), (5.0, 5.0)),
    )
}


@dataclass(frozen=True, slots=True)
class PlannedLoad:
    load: Load
    start: int  # a minute boundary, unix seconds
    end: int  # start + whole minutes


def plan_loads(loads: Sequence[Load], first_minute: int, minutes: int) -> list[PlannedLoad]:
    """The loads back to back from `first_minute`, each filling `minutes` whole minutes."""
    if first_minute % WINDOW_S:
        raise ValueError("the plan starts on a minute boundary")
    if minutes < 1:
        raise ValueError("each load runs at least one whole minute")
    span = minutes * WINDOW_S
    return [
        PlannedLoad(load, first_minute + i * span, first_minute + (i + 1) * span)
        for i, load in enumerate(loads)
    ]


def first_minute_after(now: float, lead_s: float) -> int:
    """The first minute boundary at least `lead_s` after `now`."""
    return math.ceil((now + lead_s) / WINDOW_S) * WINDOW_S


# -- ground truth ----------------------------------------------------------------------------------


class TruthLog:
    """The load driver's busy intervals, thread-safe. Each edge is dated by reading the clock
    under the log's lock, so whoever asks the log (the fake card in --fake mode) sees an
    interval from the very instant it is dated; an open interval is busy up to now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.intervals: list[tuple[str, float, float]] = []  # (load name, start, end)
        self._ends_us: list[int] = []  # the intervals' ends in microseconds, for look-ups
        self._open: tuple[str, float] | None = None

    def begin(self, load: str, clock: Clock) -> float:
        with self._lock:
            t = clock.now()
            self._open = (load, t)
            return t

    def end(self, clock: Clock) -> float:
        with self._lock:
            t = clock.now()
            if self._open is not None:
                load, start = self._open
                self.intervals.append((load, start, t))
                self._ends_us.append(round(t * US))
                self._open = None
            return t

    def spans(self) -> list[Interval]:
        with self._lock:
            return [(s, e) for _, s, e in self.intervals]

    def busy_us(self, a: int, b: int, now_us: int) -> int:
        """Busy microseconds in [a, b) (unix microseconds) as known at `now_us`."""
        total = 0
        with self._lock:
            i = bisect.bisect_right(self._ends_us, a)
            while i < len(self.intervals):
                start = round(self.intervals[i][1] * US)
                if start >= b:
                    break
                total += max(0, min(self._ends_us[i], b) - max(start, a))
                i += 1
            if self._open is not None:
                start = round(self._open[1] * US)
                total += max(0, min(now_us, b) - max(start, a))
        return total


class TruthLoad:
    """The fake card's load (``telemetry.agent.fake.loads.Load``) in --fake mode: busy exactly
    when the load driver's log says so. The fake derives its driver samples, instantaneous
    reads, power and energy counter from it, so the fake GPU does what the driver logs."""

    def __init__(self, truth: TruthLog, clock: Clock) -> None:
        self.truth = truth
        self.clock = clock

    def busy_us(self, a: int, b: int) -> int:
        return self.truth.busy_us(a, b, round(self.clock.now() * US)) if b > a else 0


def overlap_seconds(intervals: Sequence[Interval], a: float, b: float) -> float:
    """Total length of the (non-overlapping) intervals' overlap with [a, b)."""
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in intervals)


def true_busy_pct(intervals: Sequence[Interval], a: float, b: float) -> float:
    """The busy share of [a, b) in per cent."""
    if b <= a:
        raise ValueError("an empty span has no busy share")
    return 100.0 * overlap_seconds(intervals, a, b) / (b - a)


# -- driving the GPU -------------------------------------------------------------------------------


class Backend(Protocol):
    name: str

    def busy_until(self, clock: Clock, end: float) -> None:
        """Keep the GPU busy until at least `end` (the caller dates the phase's edges)."""
        ...


class MatmulBackend:
    """Back-to-back matrix products through PyTorch or CuPy, queued in batches of about
    `batch_s` seconds. The next batch is always queued before the host waits for the one
    before it (a CUDA event each), so the GPU never runs dry inside a busy phase; the phase
    ends with the ``synchronize()`` after the first batch that completes past its end."""

    name: str

    def __init__(self, prefer: str = "auto", size: int = 8192, batch_s: float = 0.01) -> None:
        self.size = size
        self.version = ""
        self._matmul: Callable[[], Any]
        self._sync: Callable[[], Any]
        self._event: Callable[[], Any]  # a new CUDA event: record() then synchronize()
        errors: list[str] = []
        for name in ("torch", "cupy") if prefer == "auto" else (prefer,):
            try:
                getattr(self, f"_init_{name}")(importlib.import_module(name))
            # Not installed, or built without CUDA (PyTorch then raises AssertionError).
            except (ImportError, RuntimeError, AssertionError) as exc:
                errors.append(f"{name}: {exc}")
                continue
            self.name = name
            break
        else:
            raise RuntimeError("no GPU through PyTorch or CuPy: " + "; ".join(errors))
        for _ in range(3):  # warm-up: kernels loaded, clocks up
            self._matmul()
        self._sync()
        n = 10
        begun = time.perf_counter()
        for _ in range(n):
            self._matmul()
        self._sync()
        self.matmul_s = (time.perf_counter() - begun) / n
        self.batch = max(1, round(batch_s / self.matmul_s))

    def _init_torch(self, torch: Any) -> None:
        a = torch.randn(self.size, self.size, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(a)
        self._matmul = lambda: torch.matmul(a, a, out=out)
        self._sync = torch.cuda.synchronize
        self._event = torch.cuda.Event
        self.version = str(torch.__version__)

    def _init_cupy(self, cupy: Any) -> None:
        a = cupy.random.standard_normal((self.size, self.size), dtype=cupy.float32)
        out = cupy.empty_like(a)
        self._matmul = lambda: cupy.matmul(a, a, out=out)
        self._sync = cupy.cuda.Device().synchronize
        self._event = cupy.cuda.Event
        self.version = str(cupy.__version__)

    def _queue(self) -> Any:
        for _ in range(self.batch):
            self._matmul()
        done = self._event()
        done.record()
        return done

    def busy_until(self, clock: Clock, end: float) -> None:
        queued = self._queue()
        while True:
            following = self._queue()
            queued.synchronize()  # `following` keeps the GPU busy meanwhile
            if clock.now() >= end:
                break
            queued = following
        self._sync()


def sleep_until(clock: Clock, when: float, stop: threading.Event | None = None) -> None:
    while True:
        left = when - clock.now()
        if left <= 0 or (stop is not None and stop.is_set()):
            return
        clock.sleep(min(left, 1.0))


def drive(
    plan: Sequence[PlannedLoad],
    backend: Backend,
    clock: Clock,
    truth: TruthLog,
    *,
    seed: int,
    stop: threading.Event | None = None,
) -> None:
    """Run the planned loads; every busy phase goes into `truth` as it happens."""
    for planned in plan:
        rng = random.Random(f"{seed}:{planned.load.name}")
        sleep_until(clock, planned.start, stop)
        t = float(planned.start)
        for busy_s, idle_s in planned.load.phases(rng):
            if t >= planned.end or (stop is not None and stop.is_set()):
                break
            # Phases are scheduled on absolute times: a late wake-up shortens the phase it
            # delays instead of shifting every later one.
            # Dated just before the first launch and just after the last synchronize().
            truth.begin(planned.load.name, clock)
            backend.busy_until(clock, min(t + busy_s, planned.end))
            truth.end(clock)
            t = min(t + busy_s + idle_s, float(planned.end))
            sleep_until(clock, t, stop)


# -- energy, read independently of the agent -------------------------------------------------------


def sample_energy(
    read: Callable[[], int],
    clock: Clock,
    stop: threading.Event,
    every_s: float,
    reads: list[tuple[float, int]],
) -> None:
    """Append (instant, counter mJ) every `every_s` until `stop`; the instant is the middle
    of the call. Reads that fail are skipped (the gaps show in the recording)."""
    due = clock.now()
    while not stop.is_set():
        before = clock.now()
        try:
            value = int(read())
        except Exception as exc:  # any NVML error is a missing read, not the end of the run
            log.debug("energy read failed: %s", exc)
        else:
            t = (before + clock.now()) / 2
            if not reads or t > reads[-1][0]:  # a clock standing still gives no new instant
                reads.append((t, value))
        due += every_s
        clock.sleep(max(0.0, due - clock.now()))


def counter_at(reads: Sequence[tuple[float, int]], t: float) -> float | None:
    """The energy counter at `t`, linear between the reads either side; None outside the
    reads, or where the counter went backwards between them (a driver reload)."""
    lo, hi = 0, len(reads) - 1
    if not reads or t < reads[lo][0] or t > reads[hi][0]:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reads[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, e0), (t1, e1) = reads[lo], reads[hi]
    if t in (t0, t1):  # a read at that very instant needs no neighbour
        return float(e0 if t == t0 else e1)
    if e1 < e0:
        return None
    return e0 + (e1 - e0) * (t - t0) / (t1 - t0)


# -- the comparison --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    window_start: str
    load: str | None  # the planned load the minute belongs to; None outside the plan
    full: bool  # the agent observed the whole minute
    observed_from: int
    observed_to: int
    util_method: str | None
    samples_ok: int
    samples_expected: int
    truth_pct: float  # busy share of the observed span, 3 decimals
    util_avg: float | None
    util_min: int | None
    util_max: int | None
    delta_pts: float | None  # agent - truth, 3 decimals
    energy_agent_mj: int | None  # this window's counter minus the previous minute's
    energy_ref_mj: int | None  # the script's reads, interpolated to the minute's bounds
    energy_delta_pct: float | None  # (agent - reference) / reference, 2 decimals


def observed_span(window: dict[str, Any], interval_s: float) -> tuple[int, int, bool]:
    """(from, to, full) of a window: schema 2 says it; a schema-1 window claims the whole
    minute, and is full when every sampling slot of the minute was expected."""
    if "observed_from" in window:
        lo, hi = int(window["observed_from"]), int(window["observed_to"])
        return lo, hi, lo == 0 and hi == WINDOW_S
    expected = round(WINDOW_S / interval_s)
    return 0, WINDOW_S, int(window["samples_expected"]) == expected


def util_method(window: dict[str, Any]) -> str | None:
    """Schema 2 states it; a schema-1 agent only ever read instantaneously."""
    if "util_method" in window:
        return window["util_method"]  # type: ignore[no-any-return]
    return None if window.get("util_gpu") is None else "instant"


def window_rows(
    windows: Sequence[dict[str, Any]],
    intervals: Sequence[Interval],
    energy_reads: Sequence[tuple[float, int]],
    plan: Sequence[PlannedLoad],
    *,
    interval_s: float,
) -> list[Row]:
    """One row per window of one GPU, oldest first."""
    by_start = {int(parse_rfc3339(w["window_start"])): w for w in windows}
    rows = []
    for ws in sorted(by_start):
        w = by_start[ws]
        lo, hi, full = observed_span(w, interval_s)
        load = next((p.load.name for p in plan if p.start <= ws < p.end), None)
        truth = round(true_busy_pct(intervals, ws + lo, ws + hi), 3)
        util = w.get("util_gpu")
        avg = None if util is None else float(util["avg"])
        delta = None if avg is None else round(avg - truth, 3)
        agent_e = ref_e = None
        before = by_start.get(ws - WINDOW_S)
        if (
            before is not None
            and w.get("energy_mj") is not None
            and before.get("energy_mj") is not None
            and w["energy_mj"] >= before["energy_mj"]
        ):
            agent_e = int(w["energy_mj"]) - int(before["energy_mj"])
        e0, e1 = counter_at(energy_reads, ws), counter_at(energy_reads, ws + WINDOW_S)
        if e0 is not None and e1 is not None and e1 >= e0:
            ref_e = round(e1 - e0)
        pct = None
        if agent_e is not None and ref_e:
            pct = round(100.0 * (agent_e - ref_e) / ref_e, 2)
        rows.append(
            Row(
                window_start=w["window_start"],
                load=load,
                full=full,
                observed_from=lo,
                observed_to=hi,
                util_method=util_method(w),
                samples_ok=int(w["samples_ok"]),
                samples_expected=int(w["samples_expected"]),
                truth_pct=truth,
                util_avg=avg,
                util_min=None if util is None else int(util["min"]),
                util_max=None if util is None else int(util["max"]),
                delta_pts=delta,
                energy_agent_mj=agent_e,
                energy_ref_mj=ref_e,
                energy_delta_pct=pct,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class LoadSummary:
    load: str
    full_windows: int
    expected_windows: int
    truth_pct: float | None  # mean over its full windows
    util_avg: float | None
    worst_delta_pts: float | None  # the largest |agent - truth| of its full windows, signed
    ok: bool


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    tolerance_pts: float
    judged_windows: int
    failures: list[str]
    loads: list[LoadSummary] = field(default_factory=list)

    def line(self) -> str:
        goal = f"every full window within ±{self.tolerance_pts:g} points of the truth"
        if self.ok:
            worst = max((abs(s.worst_delta_pts or 0.0) for s in self.loads), default=0.0)
            windows = f"{self.judged_windows} window{'s' if self.judged_windows != 1 else ''}"
            return f"PASS: {goal} for every load ({windows}; largest difference {worst:.3f} points)"
        return f"FAIL: not {goal} for every load: " + "; ".join(self.failures)


def judge(
    rows: Sequence[Row], plan: Sequence[PlannedLoad], tolerance_pts: float = TOLERANCE_PTS
) -> Verdict:
    """The goal: every full window of every planned load within ±tolerance of the truth, and
    every planned minute present as a full window."""
    failures: list[str] = []
    summaries: list[LoadSummary] = []
    judged = 0
    for planned in plan:
        mine = [r for r in rows if r.full and r.load == planned.load.name]
        expected = (planned.end - planned.start) // WINDOW_S
        judged += len(mine)
        ok = len(mine) == expected
        if not ok:
            failures.append(f"{planned.load.name}: {len(mine)} of {expected} minutes full")
        for r in mine:
            if r.delta_pts is None:
                ok = False
                failures.append(f"{planned.load.name} {r.window_start}: no utilization")
            elif abs(r.delta_pts) > tolerance_pts:
                ok = False
                failures.append(
                    f"{planned.load.name} {r.window_start}: agent {r.util_avg:.3f} vs "
                    f"truth {r.truth_pct:.3f} ({r.delta_pts:+.3f} points)"
                )
        deltas = [r.delta_pts for r in mine if r.delta_pts is not None]
        avgs = [r.util_avg for r in mine if r.util_avg is not None]
        summaries.append(
            LoadSummary(
                load=planned.load.name,
                full_windows=len(mine),
                expected_windows=expected,
                truth_pct=round(sum(r.truth_pct for r in mine) / len(mine), 3) if mine else None,
                util_avg=round(sum(avgs) / len(avgs), 3) if avgs else None,
                worst_delta_pts=max(deltas, key=abs) if deltas else None,
                ok=ok,
            )
        )
    return Verdict(
        ok=not failures,
        tolerance_pts=tolerance_pts,
        judged_windows=judged,
        failures=failures,
        loads=summaries,
    )


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(rows: Sequence[Row], verdict: Verdict) -> str:
    """The table an operator reads: one line per window, then per load, then the verdict."""
    head = (
        f"{'window (UTC)':<20} {'load':<8} {'observed':>8} {'method':<7} {'truth %':>8} "
        f"{'agent %':>8} {'Δ pts':>8} {'energy J':>10} {'ref J':>10} {'Δ %':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        span = f"{r.observed_from}-{r.observed_to}"
        mark = "" if r.full else " (partial: not judged)"
        lines.append(
            f"{r.window_start:<20} {r.load or '-':<8} {span:>8} {r.util_method or '-':<7} "
            f"{r.truth_pct:>8.3f} {_fmt(r.util_avg, '8.3f'):>8} {_fmt(r.delta_pts, '+8.3f'):>8} "
            f"{_fmt(None if r.energy_agent_mj is None else r.energy_agent_mj / 1000, '10.1f'):>10} "
            f"{_fmt(None if r.energy_ref_mj is None else r.energy_ref_mj / 1000, '10.1f'):>10} "
            f"{_fmt(r.energy_delta_pct, '+6.2f'):>6}{mark}"
        )
    lines.append("")
    for s in verdict.loads:
        lines.append(
            f"{s.load:<8} {s.full_windows}/{s.expected_windows} full windows  truth "
            f"{_fmt(s.truth_pct, '.3f')} %  agent {_fmt(s.util_avg, '.3f')} %  worst "
            f"{_fmt(s.worst_delta_pts, '+.3f')} points  {'ok' if s.ok else 'NOT OK'}"
        )
    energy = [abs(r.energy_delta_pct) for r in rows if r.full and r.energy_delta_pct is not None]
    if energy:
        lines.append(
            f"energy: {len(energy)} full window{'s' if len(energy) != 1 else ''}, agent vs the "
            "script's own counter reads "
            f"within {max(energy):.2f} % (informational; the goal is utilization)"
        )
    lines.append(verdict.line())
    return "\n".join(lines)


# -- the receiver ----------------------------------------------------------------------------------


class Receiver:
    """Enrolment and the batch endpoint of docs/agent.md §5 on 127.0.0.1, enough for one
    agent: one bootstrap token, the signature checked as the server checks it, batches
    gunzipped and kept in the order they were committed (202; 200 for a replay)."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.node_id = str(uuid.uuid4())
        self.node_key = secrets.token_urlsafe(32)
        self.batches: list[dict[str, Any]] = []
        self.answers: list[tuple[str, int]] = []  # (path, status) of every request
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        with self._lock:
            status, answer = self._answer(path, headers, body)
            self.answers.append((path, status))
        return status, json.dumps(answer).encode()

    def _answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path == ENROL_PATH:
            try:
                token = json.loads(body).get("bootstrap_token")
            except (ValueError, AttributeError):
                return 400, {"detail": "not JSON"}
            if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
                return 403, {"detail": "unknown or used token"}
            self.token = secrets.token_hex(16)  # spent
            return 201, {"node_id": self.node_id, "node_key": self.node_key}
        if path != BATCHES_PATH:
            return 404, {"detail": "not found"}
        batch_id = headers.get("idempotency-key", "")
        try:
            timestamp = int(headers.get("x-steward-timestamp", ""))
        except ValueError:
            return 401, {"detail": "no timestamp"}
        signed = headers.get("x-steward-node") == self.node_id and verify(
            self.node_key.encode("ascii"),
            headers.get("x-steward-signature", ""),
            method="POST",
            path=path,
            timestamp=timestamp,
            batch_id=batch_id,
            body=body,
            now=time.time(),
        )
        if not signed:
            return 401, {"detail": "bad signature"}
        if batch_id in self._seen:
            return 200, {"status": "replay"}
        try:
            doc = json.loads(gzip.decompress(body))
        except (OSError, ValueError):
            return 400, {"detail": "not gzipped JSON"}
        if not isinstance(doc, dict) or doc.get("batch_id") != batch_id:
            return 422, {"detail": "batch_id differs from the Idempotency-Key"}
        self._seen.add(batch_id)
        self.batches.append(doc)
        return 202, {"status": "accepted"}


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload = receiver.handle(self.path, headers, body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


# -- the fake GPU (--fake) -------------------------------------------------------------------------


class FakeCardBackend:
    """The load driver's stand-in for matrix products in --fake mode: the fake card is busy
    when the truth log says so (`TruthLoad`), so a busy phase only lets the clock run."""

    name = "fake"
    version = AGENT_VERSION

    def busy_until(self, clock: Clock, end: float) -> None:
        sleep_until(clock, end)


@dataclass
class FakeNode:
    """What --fake needs from cli.main's fake path, filled in when it builds the node."""

    model: str
    truth: TruthLog
    ready: threading.Event = field(default_factory=threading.Event)
    clock: Clock | None = None
    nvml: Any = None
    backend: FakeCardBackend | None = None


def fake_scenario(node: FakeNode) -> Scenario:
    """For cli.main's ``--fake`` path: one card whose load is what the load driver logs."""
    from telemetry.agent.fake import FakeGpu, FakeKernelLog, FakeNvml, Scenario
    from telemetry.agent.fake.models import model

    class TruthScenario(Scenario):
        def build(self, clock: Clock, kernel_log_path: str | None = None) -> FakeNvml:
            gpu = FakeGpu(
                slot=0,
                model=model(node.model),
                bus=0x18,
                seed=self.seed,
                load=TruthLoad(node.truth, clock),
            )
            nvml = FakeNvml(
                clock,
                [gpu],
                driver_version=self.driver_version,
                cuda_version=self.cuda_version,
                kernel_log=FakeKernelLog(kernel_log_path, self.hostname),
            )
            node.clock, node.nvml = clock, nvml
            node.backend = FakeCardBackend()
            node.ready.set()
            return nvml

    return TruthScenario(
        name="gpu-truth",
        hostname="gpu-truth-fake",
        start=0.0,
        seed=1,
        driver_version="580.159.04",
        cuda_version=13000,
        gpus=[{"model": node.model, "count": 1}],
    )


# -- the run ---------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_facts(nvml: Any, index: int) -> dict[str, Any]:
    """Driver, GPU and the other processes on it (they would spoil the ground truth)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    facts: dict[str, Any] = {
        "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver": nvml.nvmlSystemGetCudaDriverVersion(),
        "gpu_index": index,
        "gpu_name": _text(nvml.nvmlDeviceGetName(handle)),
        "gpu_uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "gpu_count": nvml.nvmlDeviceGetCount(),
    }
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        facts["other_processes"] = sorted(p.pid for p in procs if p.pid != os.getpid())
    except (AttributeError, nvml.NVMLError):  # the fake has no process list
        facts["other_processes"] = None
    return facts


def buffer_facts(nvml: Any, handle: Any) -> dict[str, Any]:
    """What the driver's utilization sample buffer holds now: how many samples (its capacity,
    after a run longer than it spans) and their period, the figures the fake NVML models."""
    try:
        _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except (AttributeError, nvml.NVMLError) as exc:
        return {"driver_buffer_samples": None, "driver_sample_period_us": None, "buffer": str(exc)}
    stamps = sorted(int(s.timeStamp) for s in samples)
    steps = sorted(b - a for a, b in itertools.pairwise(stamps))
    return {
        "driver_buffer_samples": len(stamps),
        "driver_sample_period_us": steps[len(steps) // 2] if steps else None,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu_truth.py", description=(__doc__ or "").split("\n\n", maxsplit=1)[0]
    )
    p.add_argument("--out", type=Path, help="recording directory (required for a run)")
    p.add_argument(
        "--analyse",
        type=Path,
        metavar="DIR",
        help="no run: print the table and verdict of a recording made earlier",
    )
    p.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to load")
    p.add_argument("--minutes", type=int, default=2, help="whole minutes (windows) per load")
    p.add_argument(
        "--loads",
        default=",".join(LOADS),
        help=f"comma-separated, in order (default: all of {', '.join(LOADS)})",
    )
    p.add_argument("--seed", type=int, default=18, help="seed of the random load")
    p.add_argument("--interval", type=float, default=5.0, help="the agent's sampling interval")
    p.add_argument("--tolerance", type=float, default=TOLERANCE_PTS, help="points")
    p.add_argument("--energy-every", type=float, default=0.1, help="seconds between reads")
    p.add_argument("--lead", type=float, default=20.0, help="seconds before the first load")
    p.add_argument("--backend", choices=("auto", "torch", "cupy"), default="auto")
    p.add_argument("--size", type=int, default=8192, help="matrix side (bf16 / fp32 on CuPy)")
    p.add_argument("--fake", action="store_true", help="no GPU: the fake NVML")
    p.add_argument("--fake-model", default="H100-SXM5-80GB", help="with --fake")
    p.add_argument("--speed", type=float, default=20.0, help="with --fake: clock speed")
    return p


@dataclass
class Run:
    """Everything a run produced, for analysis and the recording."""

    plan: list[PlannedLoad]
    truth: TruthLog
    energy: list[tuple[float, int]]
    batches: list[dict[str, Any]]
    facts: dict[str, Any]
    agent_rc: int


def run(args: argparse.Namespace, loads: list[Load]) -> Run:
    from telemetry.agent import cli

    truth = TruthLog()
    energy: list[tuple[float, int]] = []
    stop = threading.Event()
    facts: dict[str, Any] = {"mode": "fake" if args.fake else "gpu"}
    workdir = tempfile.TemporaryDirectory(prefix="gpu-truth-")
    with Receiver() as receiver, workdir as tmp:
        argv = [
            "--server", receiver.url,
            f"--bootstrap-token={receiver.token}",
            "--key-file", f"{tmp}/node.key",
            "--spool", f"{tmp}/spool.db",
            "--no-kmsg",
            "--interval", str(args.interval),
            "--log-level", "INFO",
        ]  # fmt: skip
        tail = args.interval + 2  # the agent's look at the plan's end closes its last minute
        scenario = None
        if args.fake:
            node = FakeNode(model=args.fake_model, truth=truth)
            scenario = fake_scenario(node)
            # The simulated clock starts `lead` before a minute boundary an hour ago: any
            # past hour would do; windows dated in the future would look odd in a recording.
            first = int(time.time()) // WINDOW_S * WINDOW_S - 3600
            start = first - args.lead
            plan = plan_loads(loads, first, args.minutes)
            argv += ["--fake", scenario.name, "--speed", str(args.speed)]
            argv += ["--start", dt.datetime.fromtimestamp(start, dt.UTC).isoformat()]
            argv += ["--duration", f"{plan[-1].end + tail - start}s"]

            def prepare() -> tuple[Clock, Backend, Any, Any]:
                # The node exists once cli.main has built it (before its clock runs).
                while not node.ready.wait(0.1):
                    if stop.is_set():
                        raise RuntimeError("the agent stopped before it built its node")
                assert node.clock is not None and node.backend is not None
                nvml = node.nvml
                nvml.nvmlInit()
                facts.update(gpu_facts(nvml, 0))
                return node.clock, node.backend, nvml, nvml.nvmlDeviceGetHandleByIndex(0)
        else:
            import pynvml

            pynvml.nvmlInit()
            facts.update(gpu_facts(pynvml, args.gpu))
            if facts["other_processes"]:
                log.warning(
                    "other processes use GPU %d: %s; their work is not in the ground truth",
                    args.gpu,
                    facts["other_processes"],
                )
            # CUDA's device order need not be NVML's: name the card by UUID.
            os.environ["CUDA_VISIBLE_DEVICES"] = facts["gpu_uuid"]
            backend = MatmulBackend(args.backend, args.size)
            facts.update(
                backend=backend.name,
                backend_version=backend.version,
                matrix_size=args.size,
                matmul_ms=round(backend.matmul_s * 1000, 3),
                matmuls_per_sync=backend.batch,
            )
            handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
            clock: Clock = RealClock()
            plan = plan_loads(loads, first_minute_after(time.time(), args.lead), args.minutes)
            argv += ["--duration", f"{plan[-1].end + tail - time.time():.1f}s"]

            def prepare() -> tuple[Clock, Backend, Any, Any]:
                return clock, backend, pynvml, handle

        threads: list[threading.Thread] = []
        failure: list[BaseException] = []
        gpu: list[tuple[Any, Any]] = []  # (NVML module, handle) once prepared

        def side() -> None:
            try:
                clock, backend, nvml, handle = prepare()
                gpu.append((nvml, handle))
                sampler = threading.Thread(
                    target=sample_energy,
                    args=(
                        lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                        clock,
                        stop,
                        args.energy_every,
                        energy,
                    ),
                    name="energy",
                    daemon=True,
                )
                sampler.start()
                threads.append(sampler)
                drive(plan, backend, clock, truth, seed=args.seed, stop=stop)
            except BaseException as exc:
                if not stop.is_set():  # the agent still runs: stop it the way an operator would
                    failure.append(exc)
                    log.exception("the load driver failed; stopping the agent")
                    os.kill(os.getpid(), signal.SIGTERM)

        driver = threading.Thread(target=side, name="load", daemon=True)
        driver.start()
        log.info(
            "loads %s, %d min each, from %s; the agent runs until %s",
            ", ".join(p.load.name for p in plan),
            args.minutes,
            rfc3339_seconds(plan[0].start),
            rfc3339_seconds(plan[-1].end + tail),
        )
        try:
            rc = cli.main(argv, scenario=scenario)
        finally:
            stop.set()
            driver.join(30)
            for thread in threads:
                thread.join(5)
        if failure:
            raise RuntimeError("the load driver failed") from failure[0]
        if gpu:
            facts.update(buffer_facts(*gpu[0]))
        facts["receiver_answers"] = {
            f"{path} {status}": sum(1 for a in receiver.answers if a == (path, status))
            for path, status in sorted(set(receiver.answers))
        }
        return Run(plan, truth, energy, list(receiver.batches), facts, rc)


def gpu_windows(batches: Sequence[dict[str, Any]], gpu_uuid: str) -> list[dict[str, Any]]:
    return [w for b in batches for w in b["windows"] if w["gpu_uuid"] == gpu_uuid]


def write_data(out: Path, result: Run, host: dict[str, Any]) -> None:
    """What the run observed: the batches, the truth, the energy reads, the host."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "batches.jsonl").open("w") as f:
        for doc in result.batches:
            f.write(json.dumps(doc, sort_keys=True) + "\n")
    loads = [
        {
            "load": p.load.name,
            "busy_s": list(p.load.busy),
            "idle_s": list(p.load.idle),
            "start": rfc3339_seconds(p.start),
            "end": rfc3339_seconds(p.end),
            "busy": [
                [round(s, 6), round(e, 6)]
                for name, s, e in result.truth.intervals
                if name == p.load.name
            ],
        }
        for p in result.plan
    ]
    # One load a line: readable, and a diff of two recordings stays small.
    body = ",\n".join(json.dumps(load) for load in loads)
    (out / "truth.json").write_text(
        f'{{"clock": {json.dumps(TRUTH_CLOCK)},\n"loads": [\n{body}\n]}}\n'
    )
    with (out / "energy.jsonl").open("w") as f:
        for t, mj in result.energy:
            f.write(json.dumps([round(t, 4), mj]) + "\n")
    (out / "host.json").write_text(json.dumps(host, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording directory read back: all the comparison needs, without the GPU."""

    plan: list[PlannedLoad]
    intervals: list[Interval]
    energy: list[tuple[float, int]]
    batches: list[dict[str, Any]]
    host: dict[str, Any]


def read_recording(directory: Path) -> Recording:
    truth = json.loads((directory / "truth.json").read_text())
    plan = [
        PlannedLoad(
            Load(item["load"], tuple(item["busy_s"]), tuple(item["idle_s"])),
            int(parse_rfc3339(item["start"])),
            int(parse_rfc3339(item["end"])),
        )
        for item in truth["loads"]
    ]
    intervals = sorted((s, e) for item in truth["loads"] for s, e in item["busy"])
    lines = (directory / "energy.jsonl").read_text().splitlines()
    energy = [(float(t), int(mj)) for t, mj in map(json.loads, lines)]
    batches = [json.loads(x) for x in (directory / "batches.jsonl").read_text().splitlines()]
    host = json.loads((directory / "host.json").read_text())
    return Recording(plan, intervals, energy, batches, host)


def analyse(rec: Recording, tolerance_pts: float = TOLERANCE_PTS) -> tuple[list[Row], Verdict]:
    """The table and the verdict of a recording: the same figures from the same files, on any
    machine (a kept fixture is asserted this way)."""
    windows = gpu_windows(rec.batches, rec.host["gpu_uuid"])
    rows = window_rows(
        windows, rec.intervals, rec.energy, rec.plan, interval_s=rec.host["interval_s"]
    )
    return rows, judge(rows, rec.plan, tolerance_pts)


def write_results(out: Path, rec: Recording, rows: Sequence[Row], verdict: Verdict) -> None:
    table = {
        "rows": [dataclasses.asdict(r) for r in rows],
        "verdict": dataclasses.asdict(verdict) | {"line": verdict.line()},
    }
    (out / "windows.json").write_text(json.dumps(table, indent=1) + "\n")
    (out / "README.md").write_text(readme(rec, verdict))


def readme(rec: Recording, verdict: Verdict) -> str:
    host = rec.host
    loads = ", ".join(p.load.name for p in rec.plan)
    minutes = (rec.plan[0].end - rec.plan[0].start) // WINDOW_S
    if host["mode"] == "fake":
        how = f"the fake NVML (`--fake`, its clock {host['speed']:g}× real time)"
    else:
        dtype = "bf16" if host["backend"] == "torch" else "fp32"
        how = (
            f"{host['backend']} {host['backend_version']} ({dtype} {host['matrix_size']}² "
            f"matrix products, {host['matmuls_per_sync']} per CUDA event)"
        )
    about = textwrap.fill(
        f"Recorded on {host['recorded_at'][:10]} by `scripts/gpu_truth.py` on one "
        f"{host['gpu_name']}, driver {host['driver']}, nvidia-ml-py {host['nvidia_ml_py']}, "
        f"Python {host['python']}; the load through {how}. Loads (busy/idle seconds): {loads}; "
        f"{minutes} whole minute{'s' if minutes != 1 else ''} each from "
        f"{rfc3339_seconds(rec.plan[0].start)}. The agent {host['agent_version']} sampled every "
        f"{host['interval_s']:g} s and delivered to the script's receiver on 127.0.0.1. (To "
        "add: the machine, virtualization, persistence mode, MIG, whatever else ran.)",
        width=96,
        break_on_hyphens=False,
    )
    return f"""# Ground truth: {host["gpu_name"]}

{about}

* `truth.json`: the plan and the busy intervals the load driver logged (unix seconds).
* `batches.jsonl`: every batch the agent delivered, in order, as the decoded JSON document.
* `energy.jsonl`: `[instant, counter mJ]`, the script's own energy reads.
* `windows.json`: per window, the true busy share vs the agent's `util_gpu` and the energy vs
  the script's reads; the verdict (`scripts/gpu_truth.py --analyse DIR` prints it again).
* `host.json`: versions, the GPU, the driver's sample buffer, the run's settings.

Result: {verdict.line()}
"""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.analyse is not None:
        rows, verdict = analyse(read_recording(args.analyse), args.tolerance)
        print(render(rows, verdict))
        return 0 if verdict.ok else 1
    if args.out is None:
        log.error("--out DIR is required (or --analyse DIR)")
        return 2
    names = [n.strip() for n in args.loads.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOADS]
    if unknown or not names:
        log.error("unknown loads %s; known: %s", unknown, ", ".join(LOADS))
        return 2
    recorded_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        result = run(args, [LOADS[n] for n in names])
    except Exception:
        log.exception("the run failed")
        return 2
    if "gpu_uuid" not in result.facts:
        log.error("the run never reached the GPU (the agent exited with %d)", result.agent_rc)
        return 2
    host = {
        **result.facts,
        "recorded_at": recorded_at,
        "agent_version": AGENT_VERSION,
        "agent_rc": result.agent_rc,
        "interval_s": args.interval,
        "minutes_per_load": args.minutes,
        "seed": args.seed,
        "energy_every_s": args.energy_every,
        "energy_reads": len(result.energy),
        "batches": len(result.batches),
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }
    if args.fake:
        host["speed"] = args.speed
        host["fake_model"] = args.fake_model
    write_data(args.out, result, host)
    # The table comes from the files just written, so the recording reproduces it exactly.
    recording = read_recording(args.out)
    rows, verdict = analyse(recording, args.tolerance)
    write_results(args.out, recording, rows, verdict)
    print(render(rows, verdict))
    print(f"recording: {args.out}")
    if result.agent_rc != 0:
        log.error("the agent exited with %d", result.agent_rc)
        return 2
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""60-second windows aligned to the minute (UTC), built one 5-second sample at a time.

Gauges keep min/avg/max over the samples that read them; counters keep the last value read;
throttle reasons are OR-ed.  The window's state is the worst state of its samples and of the
XIDs that happened inside it; its reason is the first reason that reached that state.

A window also knows which part of its minute the agent observed (its *looks*: the sampling
slots at which the agent tried to read the GPU), takes utilization from the driver's sample
buffer as time-weighted pieces when it is `buffered`, and holds the energy counter as of the
minute's end once the first read after that end has finalized it (docs/agent.md, section 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from .reader import Values
from .timefmt import rfc3339_seconds
from .utilization import Piece, weighted_gauge

WINDOW_S = 60
State = Literal["up", "degraded", "down"]
_RANK: dict[str, int] = {"up": 0, "degraded": 1, "down": 2}

GAUGES = (
    "util_gpu",
    "util_mem",
    "mem_used_bytes",
    "power_mw",
    "temp_c",
    "clock_sm_mhz",
    "clock_mem_mhz",
)
COUNTERS = (
    "mem_total_bytes",
    "energy_mj",
    "ecc_corrected",
    "ecc_uncorrected",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "retired_pages",
    "retired_pages_pending",
    "pcie_replays",
    "recovery_action",
)


def window_start(ts: float) -> int:
    t = int(ts)
    return t - t % WINDOW_S


@dataclass(slots=True)
class _Gauge:
    n: int = 0
    total: int = 0
    lo: int = 0
    hi: int = 0

    def add(self, value: int) -> None:
        if self.n == 0:
            self.lo = self.hi = value
        elif value < self.lo:
            self.lo = value
        elif value > self.hi:
            self.hi = value
        self.n += 1
        self.total += value

    def wire(self, scale: int = 1) -> dict[str, float | int] | None:
        """min/avg/max; the average is the exact mean rounded half-to-even, once.

        Unscaled gauges (%, C, MHz) keep 3 decimals; scaled ones (mW -> W) round the mean to a
        whole source unit first, so ``power_w`` always has exactly milliwatt resolution.
        """
        if self.n == 0:
            return None
        if self.total % self.n == 0:
            # A whole mean (always so for one sample a window) needs no rounding: the same
            # values as below, without building fractions.
            whole = self.total // self.n
            if scale == 1:
                return {"min": self.lo, "avg": float(whole), "max": self.hi}
            return {"min": self.lo / scale, "avg": whole / scale, "max": self.hi / scale}
        mean = Fraction(self.total, self.n)
        if scale == 1:
            return {"min": self.lo, "avg": float(round(mean, 3)), "max": self.hi}
        return {
            "min": self.lo / scale,
            "avg": round(mean) / scale,
            "max": self.hi / scale,
        }


@dataclass(slots=True)
class WindowBuilder:
    gpu_uuid: str
    start: int
    buffered: bool = False  # utilization from the sample buffer (else instantaneous reads)
    samples_ok: int = 0
    samples_expected: int = 0
    state: State = "up"
    reason: str | None = None
    throttle: int | None = None
    gauges: dict[str, _Gauge] = field(default_factory=lambda: {g: _Gauge() for g in GAUGES})
    last: dict[str, int | bool | None] = field(default_factory=lambda: dict.fromkeys(COUNTERS))
    first_look: float | None = None  # seconds after `start`
    look_end: float = 0.0  # the last look's offset plus the interval then
    energy_at: float | None = None  # clock time of the last energy read
    energy_end: int | None = None  # the counter at the minute's end, once finalized
    pieces: dict[str, list[tuple[int, int, int, bool]]] = field(
        default_factory=lambda: {"util_gpu": [], "util_mem": []}
    )

    @property
    def end(self) -> int:
        return self.start + WINDOW_S

    @property
    def looked(self) -> bool:
        return self.first_look is not None

    def expect(self) -> None:
        """A sampling slot of this window passed (whether or not it produced a sample)."""
        self.samples_expected += 1

    def look(self, slot: float, interval_s: float) -> None:
        """The agent tried to read the GPU at `slot` (or knew it down then): it vouches for
        the GPU from `slot` for one interval."""
        offset = slot - self.start
        if self.first_look is None:
            self.first_look = offset
        self.look_end = offset + interval_s

    def note_state(self, state: State, reason: str | None) -> None:
        if _RANK[state] > _RANK[self.state]:
            self.state, self.reason = state, reason

    def add(
        self, values: Values, state: State, reason: str | None, energy_at: float | None = None
    ) -> None:
        """One successful read of the GPU (it counts in samples_ok whatever its state)."""
        self.samples_ok += 1
        self.note_state(state, reason)
        for name in GAUGES:
            value = values.get(name)
            if value is not None:
                self.gauges[name].add(int(value))
        for name in COUNTERS:
            value = values.get(name)
            if value is not None:
                self.last[name] = value
        if values.get("energy_mj") is not None:
            self.energy_at = energy_at
        reasons = values.get("throttle_reasons")
        if reasons is not None:
            self.throttle = (self.throttle or 0) | int(reasons)

    def add_pieces(self, kind: str, pieces: list[Piece]) -> None:
        """Buffer pieces, kept where they overlap the minute from the first look on."""
        if not self.buffered or self.first_look is None:
            return
        lo, hi = _us(self.start + self.first_look), self.end * 1_000_000
        kept = self.pieces[kind]
        for p in pieces:
            if p.end_us <= lo or p.start_us >= hi:
                continue
            a, b = max(p.start_us, lo), min(p.end_us, hi)
            if kept and kept[-1][1] == a and kept[-1][2:] == (p.value, p.buffered):
                kept[-1] = (kept[-1][0], b, p.value, p.buffered)  # a run of one value: one piece
            else:
                kept.append((a, b, p.value, p.buffered))

    def finalize(self, energy: int | bool | None, at: float | None) -> None:
        """The first read after the minute's end: with the read before it, the energy counter
        as of the boundary (interpolated; a counter that went back is a reset: the later read)."""
        before, at_before = self.last["energy_mj"], self.energy_at
        if (
            energy is None
            or at is None
            or before is None
            or at_before is None
            or math.ceil(round(self.look_end, 6)) < WINDOW_S  # not observed to the minute's end
            or not at_before < self.end <= at
        ):
            return
        e0, e1 = int(before), int(energy)
        a, b, end = _us(at_before), _us(at), self.end * 1_000_000
        if e1 < e0 or b == end:
            self.energy_end = e1  # a reset; or read at the boundary itself
            return
        # e0 + (e1 - e0) * (end - a) / (b - a), rounded half to even, in integers.
        q, r = divmod((e1 - e0) * (end - a), b - a)
        if 2 * r > b - a or (2 * r == b - a and q % 2):
            q += 1
        self.energy_end = e0 + q

    def observed(self, stopped_at: float | None = None) -> tuple[int, int]:
        """[from, to): whole seconds of the minute the agent observed (to may equal from when
        it stopped at the very instant of its only look: nothing to send)."""
        if self.first_look is None:
            raise RuntimeError("a window without a look is never sent")
        lo = math.floor(round(self.first_look, 6))
        hi = min(WINDOW_S, math.ceil(round(self.look_end, 6)))
        if stopped_at is not None and stopped_at < self.end:
            hi = min(hi, math.ceil(round(stopped_at - self.start, 6)))
        return lo, max(lo, hi)

    def _utilization(
        self, lo: int, hi: int
    ) -> tuple[dict[str, float | int] | None, dict[str, float | int] | None, str | None]:
        """util_gpu, util_mem and the method, over the observed span [lo, hi) (seconds)."""
        out: list[dict[str, float | int] | None] = []
        sources: set[str] = set()
        for kind in ("util_gpu", "util_mem"):
            span = weighted_gauge(self.pieces[kind], _us(self.start + lo), _us(self.start + hi))
            if span is not None:
                lo_v, hi_v, total, length, buffered, gap = span
                if buffered:
                    sources.add("buffer")
                if gap:
                    sources.add("instant")
                mean = Fraction(total, length)
                avg = float(round(mean, 3)) if mean.denominator != 1 else float(mean)
                out.append({"min": lo_v, "avg": avg, "max": hi_v})
                continue
            gauge = self.gauges[kind].wire()
            if gauge is not None:
                sources.add("instant")
            out.append(gauge)
        method = None
        if sources:
            method = sources.pop() if len(sources) == 1 else "mixed"
        return out[0], out[1], method

    def wire(self, stopped_at: float | None = None) -> dict[str, Any]:
        state, reason = self.state, self.reason
        if self.samples_ok == 0 and state == "up":
            # No read succeeded and nothing said why: the agent cannot vouch for the GPU.
            state, reason = "down", "no_samples"
        g = self.gauges
        last = self.last
        lo, hi = self.observed(stopped_at)
        util_gpu, util_mem, method = self._utilization(lo, hi)
        energy = self.energy_end if self.energy_end is not None else last["energy_mj"]
        return {
            "gpu_uuid": self.gpu_uuid,
            "window_start": rfc3339_seconds(self.start),
            "observed_from": lo,
            "observed_to": hi,
            "samples_ok": self.samples_ok,
            "samples_expected": self.samples_expected,
            "state": state,
            "state_reason": reason,
            "util_gpu": util_gpu,
            "util_mem": util_mem,
            "util_method": method,
            "mem_used_bytes": _int_gauge(g["mem_used_bytes"]),
            "mem_total_bytes": last["mem_total_bytes"],
            "power_w": g["power_mw"].wire(scale=1000),
            "energy_mj": energy,
            "temp_c": g["temp_c"].wire(),
            "clock_sm_mhz": g["clock_sm_mhz"].wire(),
            "clock_mem_mhz": g["clock_mem_mhz"].wire(),
            "throttle_reasons": self.throttle,
            "ecc_corrected": last["ecc_corrected"],
            "ecc_uncorrected": last["ecc_uncorrected"],
            "remapped_rows_correctable": last["remapped_rows_correctable"],
            "remapped_rows_uncorrectable": last["remapped_rows_uncorrectable"],
            "remapped_rows_pending": last["remapped_rows_pending"],
            "remapped_rows_failure": last["remapped_rows_failure"],
            "retired_pages": last["retired_pages"],
            "retired_pages_pending": last["retired_pages_pending"],
            "pcie_replays": last["pcie_replays"],
            "recovery_action": last["recovery_action"],
        }


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _int_gauge(gauge: _Gauge) -> dict[str, float | int] | None:
    """Byte gauges: the average is rounded to a whole byte (half to even)."""
    if gauge.n == 0:
        return None
    if gauge.total % gauge.n == 0:
        return {"min": gauge.lo, "avg": gauge.total // gauge.n, "max": gauge.hi}
    return {"min": gauge.lo, "avg": round(Fraction(gauge.total, gauge.n)), "max": gauge.hi}


# Recovery actions (NVML_GPU_RECOVERY_ACTION_*) and what they mean for the GPU's state.
RECOVERY_ACTIONS: dict[int, tuple[str, State]] = {
    0: ("NONE", "up"),
    1: ("GPU_RESET", "down"),
    2: ("NODE_REBOOT", "down"),
    3: ("DRAIN_P2P", "degraded"),
    4: ("DRAIN_AND_RESET", "degraded"),
    5: ("RECOVER_IMEX_DOMAIN", "degraded"),
    6: ("BUS_RESET", "down"),
    7: ("SYSTEM_REBOOT", "down"),
}


def health_from_values(values: Values) -> tuple[State, str | None]:
    """State that a successful read implies (row remap pending, recovery action, ...)."""
    state: State = "up"
    reason: str | None = None

    def worse(candidate: State, why: str) -> None:
        nonlocal state, reason
        if _RANK[candidate] > _RANK[state]:
            state, reason = candidate, why

    action = values.get("recovery_action")
    if isinstance(action, int) and not isinstance(action, bool) and action != 0:
        name, implied = RECOVERY_ACTIONS.get(action, (str(action), "degraded"))
        worse(implied, f"recovery_action:{name}")
    if values.get("remapped_rows_failure"):
        worse("degraded", "row_remap_failure")
    if values.get("remapped_rows_pending"):
        worse("degraded", "row_remap_pending")
    if values.get("retired_pages_pending"):
        worse("degraded", "retired_pages_pending")
    return state, reason

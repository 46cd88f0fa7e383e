"""60-second windows aligned to the minute (UTC), built one 5-second sample at a time.

Gauges keep min/avg/max over the samples that read them; counters keep the last value read;
throttle reasons are OR-ed.  The window's state is the worst state of its samples and of the
XIDs that happened inside it; its reason is the first reason that reached that state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from .reader import Values
from .timefmt import rfc3339_seconds

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
    samples_ok: int = 0
    samples_expected: int = 0
    state: State = "up"
    reason: str | None = None
    throttle: int | None = None
    gauges: dict[str, _Gauge] = field(default_factory=lambda: {g: _Gauge() for g in GAUGES})
    last: dict[str, int | bool | None] = field(default_factory=lambda: dict.fromkeys(COUNTERS))

    @property
    def end(self) -> int:
        return self.start + WINDOW_S

    def expect(self) -> None:
        """A sampling slot of this window passed (whether or not it produced a sample)."""
        self.samples_expected += 1

    def note_state(self, state: State, reason: str | None) -> None:
        if _RANK[state] > _RANK[self.state]:
            self.state, self.reason = state, reason

    def add(self, values: Values, state: State, reason: str | None) -> None:
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
        reasons = values.get("throttle_reasons")
        if reasons is not None:
            self.throttle = (self.throttle or 0) | int(reasons)

    def wire(self) -> dict[str, Any]:
        state, reason = self.state, self.reason
        if self.samples_ok == 0 and state == "up":
            # No read succeeded and nothing said why: the agent cannot vouch for the GPU.
            state, reason = "down", "no_samples"
        g = self.gauges
        last = self.last
        return {
            "gpu_uuid": self.gpu_uuid,
            "window_start": rfc3339_seconds(self.start),
            "samples_ok": self.samples_ok,
            "samples_expected": self.samples_expected,
            "state": state,
            "state_reason": reason,
            "util_gpu": g["util_gpu"].wire(),
            "util_mem": g["util_mem"].wire(),
            "mem_used_bytes": _int_gauge(g["mem_used_bytes"]),
            "mem_total_bytes": last["mem_total_bytes"],
            "power_w": g["power_mw"].wire(scale=1000),
            "energy_mj": last["energy_mj"],
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

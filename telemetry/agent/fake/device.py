"""One fake GPU: identity, values that evolve with time, and its fault state."""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass, field

import pynvml

from .loads import US, Load
from .models import GpuModel

# Recovery actions as NVML reports them (NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_NONE = pynvml.NVML_GPU_RECOVERY_ACTION_NONE
RECOVERY_GPU_RESET = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
RECOVERY_DRAIN_AND_RESET = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET


@dataclass(slots=True)
class Snapshot:
    util_gpu: int
    util_mem: int
    mem_used: int
    power_mw: int
    temp_c: int
    sm_clock: int
    mem_clock: int
    reasons: int


@dataclass(slots=True)
class FakeGpu:
    """State of one card; values are a pure function of (seed, slot, time) plus counters.

    Utilization comes from `load` when one is set (the scenario loads of the tests), else from
    the default model: minute-long busy/idle phases, one value per second, where
    ``snapshot(k).util_gpu`` is the utilization of the second ``(k - 1, k]``.
    """

    slot: int  # stable id in the node (survives removal of other cards)
    model: GpuModel
    bus: int  # PCI bus number
    seed: int
    busy: float = 0.7
    uuid: str = ""
    serial: str = ""
    lost: bool = False
    reset_required: bool = False
    present: bool = True
    energy_mj: float = 0.0
    loaded_at: float = 0.0  # driver load time: volatile counters count from here
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    retired_sbe: list[int] = field(default_factory=list)
    retired_dbe: list[int] = field(default_factory=list)
    retired_pending: bool = False
    recovery_action: int = RECOVERY_NONE
    pinned: dict[str, int] = field(default_factory=dict)
    load: Load | None = None
    buffer_since_us: int = 0  # the driver's sample buffer holds nothing from before this
    util_phase_us: int = 0  # where this card's driver periods fall (per card, from its seed)
    _last_t: float | None = None
    _snaps: dict[int, Snapshot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(f"{self.seed}:{self.slot}:{self.model.key}".encode()).digest()
        if not self.uuid:
            self.uuid = f"GPU-{uuid.UUID(bytes=digest[:16])}"
        if not self.serial:
            self.serial = str(1650000000000 + int.from_bytes(digest[16:22]) % 10**9)
        self.util_phase_us = int.from_bytes(digest[22:26]) % self.model.util_period_us

    @property
    def bus_id(self) -> str:
        """NVML's form: 8-hex-digit domain, upper case."""
        return f"00000000:{self.bus:02X}:00.0"

    @property
    def kernel_bus_id(self) -> str:
        """The kernel log's form: ``0000:1b:00``."""
        return f"0000:{self.bus:02x}:00"

    def snapshot(self, now: float) -> Snapshot:
        key = int(now)
        snap = self._snaps.get(key)
        if snap is not None:
            return snap
        m = self.model
        # Jobs run in minute-long phases so utilization is bursty, like a real rental.
        phase = random.Random(self.seed * 1_000_003 + self.slot * 7919 + key // 60)
        busy = phase.random() < self.busy
        rng = random.Random(self.seed * 1_000_033 + self.slot * 104_729 + key)
        util = rng.randint(85, 100) if busy else rng.randint(0, 3)
        if self.load is not None:
            busy = True  # a load's card holds its memory throughout
            util = round(self.load.busy_us((key - 1) * US, key * US) * 100 / US)
        p = self.pinned
        util = p.get("util_gpu", util)
        # Idle, no process holds memory: a real H100's v2 "used" is then exactly 0.
        mem_used = int(m.memory_total * (0.70 + 0.15 * phase.random())) if busy else 0
        power = m.power_idle_mw + (m.power_max_mw - m.power_idle_mw) * util // 100
        power += rng.randint(-2000, 2000)
        power = max(1000, p.get("power_mw", power))
        reasons = pynvml.nvmlClocksEventReasonGpuIdle if util < 5 else 0
        if power > m.power_max_mw * 0.97:
            reasons |= pynvml.nvmlClocksEventReasonSwPowerCap
        snap = Snapshot(
            util_gpu=util,
            util_mem=p.get("util_mem", util * 6 // 10),
            mem_used=p.get("mem_used", mem_used),
            power_mw=power,
            temp_c=p.get("temp_c", 31 + util * 45 // 100 + rng.randint(0, 2)),
            sm_clock=p.get(
                "sm_clock",
                m.sm_clock_idle if util < 5 else m.sm_clock_max - rng.randint(0, 60),
            ),
            mem_clock=p.get("mem_clock", m.mem_clock),
            reasons=p.get("reasons", reasons),
        )
        if len(self._snaps) >= 16:
            self._snaps.clear()  # a few recent seconds are all the driver samples ask for
        self._snaps[key] = snap
        return snap

    # -- the driver's utilization samples ------------------------------------------------------

    def util_us(self, a: int, b: int) -> int:
        """Utilization integrated over ``(a, b]`` (µs), in percent-microseconds."""
        if self.load is not None:
            return 100 * self.load.busy_us(a, b)
        if (b - 1) // US == a // US:  # inside one second (k - 1, k]: most driver periods
            return self.snapshot(a // US + 1).util_gpu * (b - a)
        total, t = 0, a
        while t < b:
            second_end = (t // US + 1) * US  # the default model is flat over (k - 1, k]
            end = min(b, second_end)
            total += self.snapshot(second_end // US).util_gpu * (end - t)
            t = end
        return total

    def sample_value(self, t_us: int) -> tuple[int, int]:
        """GPU and memory utilization of the driver period ending at `t_us`: the busy share of
        that period, rounded to a whole percent, as the driver reports it."""
        period = self.model.util_period_us
        gpu = self.pinned.get("util_gpu")
        if gpu is None:
            gpu = round(self.util_us(t_us - period, t_us) / period)
        return gpu, self.pinned.get("util_mem", gpu * 6 // 10)

    def sample_times(self, after_us: int, now_us: int) -> range:
        """Timestamps the sample buffer holds after `after_us` at `now_us`: one per period, the
        newest `util_buffer_capacity` (a ring), none from before a driver reload or reset."""
        period, phase = self.model.util_period_us, self.util_phase_us
        newest = (now_us - phase) // period
        first = max(
            newest - self.model.util_buffer_capacity + 1,
            (max(after_us, self.buffer_since_us) - phase) // period + 1,
        )
        return range(phase + first * period, phase + (newest + 1) * period, period)

    def last_period(self, now_us: int) -> tuple[int, int]:
        """What an instantaneous read reports: the last complete driver period only."""
        period, phase = self.model.util_period_us, self.util_phase_us
        return self.sample_value(phase + (now_us - phase) // period * period)

    def advance(self, now: float) -> None:
        """Integrate energy up to `now` at the power last observed (piecewise constant)."""
        if self._last_t is None:
            self._last_t = now
            return
        dt = now - self._last_t
        if dt <= 0:
            return
        if self.load is not None and "power_mw" not in self.pinned:
            # Power follows the load to the microsecond: the counter is the exact integral,
            # whoever reads it when.
            a, b = round(self._last_t * US), round(now * US)
            m = self.model
            swing = (m.power_max_mw - m.power_idle_mw) * self.load.busy_us(a, b)
            self.energy_mj += (m.power_idle_mw * (b - a) + swing) / US  # mW * µs / 1e6 = mJ
        else:
            # The default model holds the power last observed (cheap for long backfills).
            self.energy_mj += self.snapshot(self._last_t).power_mw * dt  # mW * s = mJ
        self._last_t = now

    def pcie_replays(self, now: float) -> int:
        # A slow, deterministic trickle of link replays: one per 30 minutes since driver load.
        return max(0, int((now - self.loaded_at) // 1800))

    def driver_reload(self, now: float) -> None:
        """Volatile counters restart from zero; a reset clears reset-required states."""
        self.energy_mj = 0.0
        self._last_t = now
        self.loaded_at = now
        self.buffer_since_us = round(now * US)
        self.reset_required = False
        self.remap_pending = False
        self.retired_pending = False
        self.recovery_action = RECOVERY_NONE
        if self.lost:
            # A card that fell off the bus does not come back with a reload: it goes missing.
            self.present = False

    def apply_xid(self, xid: int) -> None:
        """Side effects a real XID has on the counters NVML exposes."""
        remaps = self.model.has("remapped_rows")
        if xid == 92:
            self.ecc_corrected += 25
        elif xid in (48, 94, 95):
            self.ecc_uncorrected += 1
            if remaps:
                self.remapped_uncorrectable += 1
                self.remap_pending = True
                self.recovery_action = RECOVERY_DRAIN_AND_RESET
            elif self.model.has("retired_pages"):
                self.retired_dbe.append(0x1000 * (len(self.retired_dbe) + 1))
                self.retired_pending = True
            if xid == 95:
                self.reset_required = True
                self.recovery_action = RECOVERY_GPU_RESET
        elif xid == 63:
            if remaps:
                self.remapped_correctable += 1
                self.remap_pending = True
            else:
                self.retired_sbe.append(0x2000 * (len(self.retired_sbe) + 1))
                self.retired_pending = True
        elif xid == 64:
            self.remap_failure = remaps
        elif xid == 79:
            self.lost = True

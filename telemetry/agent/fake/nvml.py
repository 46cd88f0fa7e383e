"""A stand-in for the ``pynvml`` module, driven by a clock and a fault schedule.

Constants, structs and exception classes are the real ones from ``pynvml`` (looked up on
attribute access), errors are raised as ``pynvml.NVMLError(code)`` so pynvml's own code-to-
subclass mapping applies, handles are real ``c_nvmlDevice_t`` pointers (never dereferenced) and
results are the real ctypes structs.  Functions the fake does not implement raise
AttributeError instead of reaching the real library.
"""

from __future__ import annotations

import collections
import ctypes
import struct
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from telemetry.agent.clock import Clock

from .device import RECOVERY_GPU_RESET, RECOVERY_NONE, FakeGpu
from .kernel_log import FakeKernelLog

_GEN_STRIDE = 0x100000
_SAMPLE = struct.Struct("<QI4x")  # nvmlSample_t: timeStamp, then the 8-byte value union
# pynvml's functions: the fake must implement each one it offers, never borrow the real one.
_REAL_FUNCTIONS = frozenset(
    name for name, value in vars(pynvml).items() if isinstance(value, types.FunctionType)
)


@dataclass(slots=True)
class _Hang:
    slot: int | None
    call: str | None
    seconds: float | None


@dataclass(slots=True)
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu slot -> event mask
    pending: collections.deque[tuple[int, int, int]] = field(default_factory=collections.deque)


class FakeNvml:
    """Module-like object: pass it wherever the agent expects the ``pynvml`` module."""

    def __init__(
        self,
        clock: Clock,
        gpus: Iterable[FakeGpu],
        *,
        driver_version: str = "550.127.05",
        cuda_version: int = 12040,
        kernel_log: FakeKernelLog | None = None,
    ) -> None:
        self._clock = clock
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.kernel_log = kernel_log or FakeKernelLog()
        self._lock = threading.RLock()
        self._init_count = 0
        self._generation = 0
        self._unavailable: int | None = None
        self._failures: dict[tuple[int | None, str], collections.deque[int]] = {}
        self._hangs: list[_Hang] = []
        self._release = threading.Event()
        self._event_sets: dict[int, _EventSet] = {}
        self._next_set = 1
        self.schedule: list[tuple[float, Any]] = []  # (when, callable(FakeNvml)) sorted
        self.calls: collections.Counter[str] = collections.Counter()
        self._fault_time: float | None = None
        now = clock.now()
        for gpu in self.gpus:
            gpu.loaded_at = now
            gpu.advance(now)

    # -- module look-alike ---------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name in _REAL_FUNCTIONS:
            raise AttributeError(f"the fake NVML does not implement {name}")
        return getattr(pynvml, name)

    # -- fault injection -----------------------------------------------------------------

    def at(self, when: float, action: Any) -> None:
        """Schedule `action(self)` for clock time `when` (applied on the next NVML call)."""
        with self._lock:
            self.schedule.append((when, action))
            self.schedule.sort(key=lambda item: item[0])

    def lose_gpu(self, slot: int) -> None:
        gpu = self.gpus[slot]
        gpu.lost = True
        self.kernel_log.xid(self._when(), gpu, 79, "GPU has fallen off the bus.")

    def require_reset(self, slot: int) -> None:
        gpu = self.gpus[slot]
        gpu.reset_required = True
        gpu.recovery_action = RECOVERY_GPU_RESET

    def recover_gpu(self, slot: int) -> None:
        gpu = self.gpus[slot]
        gpu.lost = False
        gpu.reset_required = False
        gpu.present = True
        gpu.recovery_action = RECOVERY_NONE
        gpu.buffer_since_us = self._now_us()  # a reset GPU's driver starts a new buffer

    def inject_xid(self, slot: int, xid: int, *, nvml: bool = True, kmsg: bool = True) -> None:
        gpu = self.gpus[slot]
        gpu.apply_xid(xid)
        if nvml:
            with self._lock:
                for es in self._event_sets.values():
                    if es.registered.get(slot, 0) & pynvml.nvmlEventTypeXidCriticalError:
                        es.pending.append((slot, pynvml.nvmlEventTypeXidCriticalError, xid))
        if kmsg:
            self.kernel_log.xid(self._when(), gpu, xid, "")

    def fail_next(self, slot: int | None, call: str, code: int, count: int = 1) -> None:
        """The next `count` calls of `call` (on GPU `slot`, or node-wide) raise NVMLError(code)."""
        with self._lock:
            self._failures.setdefault((slot, call), collections.deque()).extend([code] * count)

    def hang(self, slot: int | None, call: str | None = None, seconds: float | None = None) -> None:
        """The next matching call blocks (real time) for `seconds` or until `release_hangs`."""
        with self._lock:
            self._release.clear()
            self._hangs.append(_Hang(slot, call, seconds))

    def release_hangs(self) -> None:
        self._release.set()

    def driver_reload(self) -> None:
        """Unload and reload the driver: NVML state is gone, volatile counters restart."""
        now = self._clock.now()
        with self._lock:
            self._init_count = 0
            self._generation += 1
            self._event_sets.clear()
            for gpu in self.gpus:
                gpu.driver_reload(now)

    def set_unavailable(self, code: int | None) -> None:
        """Make nvmlInit fail with `code` (e.g. LibraryNotFound); None makes NVML available."""
        self._unavailable = code

    def remove_gpu(self, slot: int) -> None:
        self.gpus[slot].present = False

    def add_gpu(self, gpu: FakeGpu) -> None:
        gpu.loaded_at = self._clock.now()
        self.gpus.append(gpu)

    # -- internals -----------------------------------------------------------------------

    def _now_us(self) -> int:
        """The fake's clock as the driver stamps samples: CPU time in whole microseconds."""
        return round(self._clock.now() * 1_000_000)

    def _when(self) -> float:
        return self._fault_time if self._fault_time is not None else self._clock.now()

    def _apply_due(self) -> None:
        if not self.schedule:
            return
        now = self._clock.now()
        while True:
            with self._lock:
                if not self.schedule or self.schedule[0][0] > now:
                    return
                when, action = self.schedule.pop(0)
            # Scheduled faults are dated when they were due, not when a call noticed them.
            self._fault_time = when
            try:
                action(self)
            finally:
                self._fault_time = None

    def _enter(self, call: str, slot: int | None) -> None:
        self.calls[call] += 1
        self._apply_due()
        if self._hangs:
            self._maybe_hang(call, slot)
        if self._failures:
            with self._lock:
                for key in ((slot, call), (None, call)):
                    queue = self._failures.get(key)
                    if queue:
                        code = queue.popleft()
                        raise pynvml.NVMLError(code)

    def _maybe_hang(self, call: str, slot: int | None) -> None:
        with self._lock:
            for hang in self._hangs:
                if (hang.slot is None or hang.slot == slot) and hang.call in (None, call):
                    self._hangs.remove(hang)
                    break
            else:
                return
        self._release.wait(hang.seconds)

    def _node(self, call: str) -> None:
        if self._init_count <= 0:
            self._enter(call, None)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        self._enter(call, None)

    def _gpu(self, handle: Any, call: str, cap: str | None = None) -> FakeGpu:
        address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        generation, slot = divmod(address, _GEN_STRIDE)
        slot = slot // 0x10 - 1
        self._enter(call, slot)
        if self._init_count <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if generation != self._generation + 1 or not 0 <= slot < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[slot]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if gpu.reset_required:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_RESET_REQUIRED)
        if cap is not None and not gpu.model.has(cap):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu.advance(self._clock.now())
        return gpu

    def _handle(self, gpu: FakeGpu) -> Any:
        address = (self._generation + 1) * _GEN_STRIDE + (gpu.slot + 1) * 0x10
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)

    def _present(self) -> list[FakeGpu]:
        return [gpu for gpu in self.gpus if gpu.present]

    # -- initialisation and system queries ---------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._enter("nvmlInit", None)
        if self._unavailable is not None:
            raise pynvml.NVMLError(self._unavailable)
        with self._lock:
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._node("nvmlShutdown")
        with self._lock:
            self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._node("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._node("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._node("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._node("nvmlDeviceGetCount")
        return len(self._present())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._node("nvmlDeviceGetHandleByIndex")
        present = self._present()
        if not 0 <= index < len(present):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handle(present[index])

    # -- identity --------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetSerial", "serial").serial

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").model.name

    def nvmlDeviceGetBoardPartNumber(self, handle: Any) -> str:
        gpu = self._gpu(handle, "nvmlDeviceGetBoardPartNumber", "board_part_number")
        return gpu.model.part_number

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id[4:].encode()
        info.domain, info.bus, info.device = 0, gpu.bus, 0
        info.pciDeviceId = gpu.model.pci_device_id
        return info

    # -- sampling --------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        # The busy share of the driver's last sample period only: a point sample, which a
        # periodic poller can lock onto in phase with a periodic load (as the real one does).
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.last_period(self._now_us())
        return util

    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, last_seen_us: int) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetSamples", "util_samples")
        kinds = (pynvml.NVML_GPU_UTILIZATION_SAMPLES, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES)
        if sampling_type not in kinds:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # not modelled
        times = gpu.sample_times(int(last_seen_us), self._now_us())
        if not times:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # nothing newer than asked
        memory = sampling_type == pynvml.NVML_MEMORY_UTILIZATION_SAMPLES
        # The real structs, laid out as the driver writes them (a timestamp, then the value
        # union whose first 4 bytes are uiVal), built in one go: tests ask for many.
        raw = bytearray(16 * len(times))
        for i, t in enumerate(times):
            _SAMPLE.pack_into(raw, 16 * i, t, gpu.sample_value(t)[memory])
        samples = (pynvml.c_nvmlSample_t * len(times)).from_buffer(raw)
        # pynvml answers (value type, a list sliced from the ctypes array).
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples[0 : len(times)]

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if version:
            gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo_v2")
            if not gpu.model.has("memory_v2"):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            mem: Any = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.reserved = gpu.model.memory_reserved
        else:
            gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
            mem = pynvml.c_nvmlMemory_t()
        allocated = gpu.snapshot(self._clock.now()).mem_used
        # v1 counts the driver's reservation as used (an idle card is never at zero); both
        # report the same free memory.
        reserved = gpu.model.memory_reserved
        mem.total = gpu.model.memory_total
        mem.used = allocated if version else allocated + reserved
        mem.free = gpu.model.memory_total - allocated - reserved
        return mem

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetPowerUsage")
        return gpu.snapshot(self._clock.now()).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption", "energy")
        return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.snapshot(self._clock.now()).temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        snap = gpu.snapshot(self._clock.now())
        if clock_type == pynvml.NVML_CLOCK_SM:
            return snap.sm_clock
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return snap.mem_clock
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        call = "nvmlDeviceGetCurrentClocksEventReasons"
        gpu = self._gpu(handle, call, "clocks_event_reasons")
        return gpu.snapshot(self._clock.now()).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return gpu.snapshot(self._clock.now()).reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors", "ecc")
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        gpu = self._gpu(handle, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return (
            gpu.remapped_correctable,
            gpu.remapped_uncorrectable,
            int(gpu.remap_pending),
            int(gpu.remap_failure),
        )

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPages", "retired_pages")
        sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        return list(gpu.retired_sbe if cause == sbe else gpu.retired_dbe)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        call = "nvmlDeviceGetRetiredPagesPendingStatus"
        return int(self._gpu(handle, call, "retired_pages").retired_pending)

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetPcieReplayCounter", "pcie_replay")
        return gpu.pcie_replays(self._clock.now())

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        now_us = int(self._clock.now() * 1_000_000)
        for i, field_id in enumerate(field_ids):
            values[i].fieldId = field_id
            values[i].timestamp = now_us
            supported = field_id == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and gpu.model.has(
                "recovery_action"
            )
            if not supported:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            values[i].nvmlReturn = pynvml.NVML_SUCCESS
            values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            values[i].value.uiVal = gpu.recovery_action
        return values

    # -- events ----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._node("nvmlEventSetCreate")
        with self._lock:
            key = self._next_set
            self._next_set += 1
            self._event_sets[key] = _EventSet()
        return ctypes.cast(ctypes.c_void_p(key * 0x10), pynvml.c_nvmlEventSet_t)

    def _event_set(self, event_set: Any) -> _EventSet:
        key = (ctypes.cast(event_set, ctypes.c_void_p).value or 0) // 0x10
        es = self._event_sets.get(key)
        if es is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetSupportedEventTypes")
        mask: int = pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeClock
        if gpu.model.has("xid_events"):
            mask |= pynvml.nvmlEventTypeXidCriticalError
        if gpu.model.has("ecc"):
            mask |= pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
        return mask

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if event_types & ~self.nvmlDeviceGetSupportedEventTypes(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            es = self._event_set(event_set)
            es.registered[gpu.slot] = es.registered.get(gpu.slot, 0) | event_types

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        self._node("nvmlEventSetWait_v2")
        with self._lock:
            es = self._event_set(event_set)
            if not es.pending:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            slot, event_type, data = es.pending.popleft()
        event = pynvml.c_nvmlEventData_t()
        event.device = self._handle(self.gpus[slot])
        event.eventType = event_type
        event.eventData = data
        return event

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._node("nvmlEventSetFree")
        with self._lock:
            key = (ctypes.cast(event_set, ctypes.c_void_p).value or 0) // 0x10
            self._event_sets.pop(key, None)

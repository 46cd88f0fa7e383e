"""Read one sample of one GPU through an NVML module (real ``pynvml`` or the fake).

Utilization comes from the driver's sample buffer (every sample since the last one seen, see
``utilization.py``) when the window being filled uses it, or from an instantaneous read; the
buffer answering NotSupported is remembered like any unsupported metric. The clock time of
the energy read comes back with the values: windows interpolate the counter at the minute's
boundary with it.

Per-metric errors are absorbed here: NotSupported/FunctionNotFound/NoPermission mark the metric
unsupported for this GPU (it is never asked again and reported as null); other non-fatal errors
null the metric for this sample only.  Errors that concern the whole GPU or NVML (lost, reset
required, uninitialized, driver gone) propagate to the caller, which turns them into states.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .clock import Clock
from .nvml_errors import (
    ARGUMENT_VERSION_MISMATCH,
    NOT_FOUND,
    ErrorAction,
    error_action,
    error_code,
)
from .utilization import Plan, Samples, SampleStream

Values = dict[str, int | bool | None]
NvmlModule = Any  # the pynvml module or telemetry.agent.fake.FakeNvml; untyped either way
BUFFER = "util_samples"  # the unsupported-metric name of the sample buffer (both kinds)
UTIL_KINDS = ("util_gpu", "util_mem")
# nvmlSample_t as the driver lays it out: an unsigned 64-bit timestamp, then the 8-byte value
# union, whose first 4 bytes are uiVal (utilization samples are unsigned ints).
_SAMPLE = struct.Struct("=QI4x")


@dataclass(slots=True)
class Reading:
    """One read of one GPU."""

    values: Values  # util_gpu/util_mem are instantaneous reads, None when from the buffer
    energy_at: float | None = None  # clock time of the energy read
    plans: dict[str, Plan] | None = None  # what new buffer samples cover; None: no buffer
    instant: tuple[int | None, int | None] | None = None  # read to cover a gap in the buffer


class GpuReader:
    def __init__(
        self,
        nvml: NvmlModule,
        handle: Any,
        unsupported: set[str],
        note_call: Callable[[str], None] | None = None,
        *,
        clock: Clock | None = None,
        streams: dict[str, SampleStream] | None = None,
    ) -> None:
        self.nvml = nvml
        self.handle = handle
        self.unsupported = unsupported
        self.clock = clock
        # Owned by the GPU's track (they outlive handles); read here, advanced by the agent.
        self.streams = streams if streams is not None else {k: SampleStream() for k in UTIL_KINDS}
        self.transient: dict[str, str] = {}
        self._note = note_call
        self._recovery_field = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        self._has_event_reasons = hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")

    def _q(
        self,
        metric: str,
        fn: Callable[..., Any],
        *args: Any,
        also_unsupported: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> Any:
        """Call `fn` for `metric`, or None if the metric is unsupported or failed transiently."""
        if metric in self.unsupported:
            return None
        if self._note is not None:
            self._note(getattr(fn, "__name__", metric))
        try:
            return fn(*args, **kwargs)
        except self.nvml.NVMLError as exc:
            action = error_action(exc)
            if action is ErrorAction.UNSUPPORTED or error_code(exc) in also_unsupported:
                self.unsupported.add(metric)
                return None
            if action is ErrorAction.TRANSIENT:
                self.transient[metric] = type(exc).__name__
                return None
            raise

    def read(self, buffered: bool = False) -> Reading:
        """One read; `buffered`: utilization from the sample buffer where it is supported."""
        nv, h = self.nvml, self.handle
        self.transient = {}
        v: Values = {"util_gpu": None, "util_mem": None}
        reading = Reading(v)
        # Utilization first: on a lost GPU it fails fast and the rest is skipped.
        samples = self._buffer() if buffered else None
        if samples is not None:
            reading.plans = {k: self.streams[k].plan(samples[k]) for k in UTIL_KINDS}
            if any(plan.has_gap for plan in reading.plans.values()):
                util = self._q("util", nv.nvmlDeviceGetUtilizationRates, h)
                if util is not None:
                    reading.instant = (util.gpu, util.memory)
        else:
            util = self._q("util", nv.nvmlDeviceGetUtilizationRates, h)
            v["util_gpu"] = util.gpu if util is not None else None
            v["util_mem"] = util.memory if util is not None else None
        mem = self._memory()
        v["mem_used_bytes"] = mem.used if mem is not None else None
        v["mem_total_bytes"] = mem.total if mem is not None else None
        v["power_mw"] = self._q("power", nv.nvmlDeviceGetPowerUsage, h)
        before = self.clock.now() if self.clock is not None else None
        v["energy_mj"] = self._q("energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        if before is not None and self.clock is not None and v["energy_mj"] is not None:
            # The counter as of the middle of the call (a real one takes milliseconds).
            reading.energy_at = (before + self.clock.now()) / 2
        v["temp_c"] = self._q("temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        v["clock_sm_mhz"] = self._q("clock_sm", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        v["clock_mem_mhz"] = self._q("clock_mem", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        v["throttle_reasons"] = self._throttle()
        v["ecc_corrected"] = self._q(
            "ecc_corrected",
            nv.nvmlDeviceGetTotalEccErrors,
            h,
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            nv.NVML_AGGREGATE_ECC,
        )
        v["ecc_uncorrected"] = self._q(
            "ecc_uncorrected",
            nv.nvmlDeviceGetTotalEccErrors,
            h,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_AGGREGATE_ECC,
        )
        rows = self._q("remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
        v["remapped_rows_correctable"] = rows[0] if rows is not None else None
        v["remapped_rows_uncorrectable"] = rows[1] if rows is not None else None
        v["remapped_rows_pending"] = bool(rows[2]) if rows is not None else None
        v["remapped_rows_failure"] = bool(rows[3]) if rows is not None else None
        v["retired_pages"] = self._retired_pages()
        pending = self._q("retired_pages", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        v["retired_pages_pending"] = bool(pending) if pending is not None else None
        v["pcie_replays"] = self._q("pcie_replays", nv.nvmlDeviceGetPcieReplayCounter, h)
        v["recovery_action"] = self._recovery_action()
        return reading

    def _buffer(self) -> dict[str, Samples] | None:
        """Each kind's samples since the last one seen, or None: the buffer is unsupported."""
        if BUFFER in self.unsupported:
            return None
        nv = self.nvml
        got: dict[str, Samples] = {}
        for name, kind in zip(
            UTIL_KINDS,
            (nv.NVML_GPU_UTILIZATION_SAMPLES, nv.NVML_MEMORY_UTILIZATION_SAMPLES),
            strict=True,
        ):
            got[name] = self._samples(kind, self.streams[name].last_seen_us)
            if BUFFER in self.unsupported:
                return None  # one kind without a buffer: both read instantaneously
        return got

    def _samples(self, kind: int, last_seen_us: int) -> Samples:
        nv = self.nvml
        if self._note is not None:
            self._note("nvmlDeviceGetSamples")
        try:
            _, raw = nv.nvmlDeviceGetSamples(self.handle, kind, last_seen_us)
        except nv.NVMLError as exc:
            if error_code(exc) == NOT_FOUND:
                return []  # nothing newer yet
            action = error_action(exc)
            if action is ErrorAction.UNSUPPORTED:
                self.unsupported.add(BUFFER)
                return []
            if action is ErrorAction.TRANSIENT:
                # Nothing is lost: the next poll asks from the same timestamp again.
                self.transient[BUFFER] = type(exc).__name__
                return []
            raise
        return plain_samples(raw)

    def _memory(self) -> Any:
        nv, h = self.nvml, self.handle
        if "memory_v2" not in self.unsupported:
            mem = self._q(
                "memory_v2",
                nv.nvmlDeviceGetMemoryInfo,
                h,
                # A driver that knows _v2 but not this struct version: fall back for good.
                also_unsupported=(ARGUMENT_VERSION_MISMATCH,),
                version=nv.nvmlMemory_v2,
            )
            if mem is not None or "memory_v2" not in self.unsupported:
                return mem  # v2 worked, or failed transiently (v1 would not do better)
        return self._q("memory", nv.nvmlDeviceGetMemoryInfo, h)

    def _throttle(self) -> int | None:
        nv, h = self.nvml, self.handle
        if self._has_event_reasons and "clocks_event_reasons" not in self.unsupported:
            reasons = self._q("clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            if "clocks_event_reasons" not in self.unsupported:
                return reasons  # type: ignore[no-any-return]
        # Drivers before the rename only have the deprecated "throttle reasons" entry point.
        return self._q("throttle_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)  # type: ignore[no-any-return]

    def _retired_pages(self) -> int | None:
        nv, h = self.nvml, self.handle
        total = 0
        for cause in (
            nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        ):
            pages = self._q("retired_pages", nv.nvmlDeviceGetRetiredPages, h, cause)
            if pages is None:
                return None
            total += len(pages)
        return total

    def _recovery_action(self) -> int | None:
        if self._recovery_field is None:
            return None  # this nvidia-ml-py predates the field
        nv = self.nvml

        def query() -> int:
            values = nv.nvmlDeviceGetFieldValues(self.handle, [self._recovery_field])
            ret = values[0].nvmlReturn
            if ret != nv.NVML_SUCCESS:
                raise nv.NVMLError(ret)  # per-field status, classified like any call
            return int(values[0].value.uiVal)

        query.__name__ = "nvmlDeviceGetFieldValues"
        return self._q("recovery_action", query)  # type: ignore[no-any-return]


def plain_samples(raw: list[Any]) -> Samples:
    """(timestamp, value) pairs from nvmlDeviceGetSamples' structs. pynvml hands back structs
    sliced from one ctypes array: their bytes are unpacked in one go (each attribute read
    through pynvml's struct class costs a microsecond, and a poll brings ~25 per kind)."""
    if not raw:
        return []
    first = raw[0]
    if (
        isinstance(first, ctypes.Structure)
        and ctypes.sizeof(first) == _SAMPLE.size
        and ctypes.addressof(raw[-1]) - ctypes.addressof(first) == _SAMPLE.size * (len(raw) - 1)
    ):
        data = ctypes.string_at(ctypes.addressof(first), _SAMPLE.size * len(raw))
        return list(_SAMPLE.iter_unpack(data))
    return [(int(s.timeStamp), int(s.sampleValue.uiVal)) for s in raw]


def read_identity(nvml: NvmlModule, handle: Any, unsupported: set[str]) -> dict[str, Any]:
    """UUID (required: errors propagate), then the optional parts of a GPU's identity."""
    reader = GpuReader(nvml, handle, unsupported)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    pci = reader._q("pci", nvml.nvmlDeviceGetPciInfo, handle)
    bus_id: str | None = None
    if pci is not None:
        raw = pci.busId
        bus_id = raw.decode() if isinstance(raw, bytes) else str(raw)
    return {
        "gpu_uuid": uuid,
        "serial": reader._q("serial", nvml.nvmlDeviceGetSerial, handle) or None,
        "name": reader._q("name", nvml.nvmlDeviceGetName, handle),
        "pci_bus_id": bus_id,
        "board_part_number": (
            reader._q("board_part_number", nvml.nvmlDeviceGetBoardPartNumber, handle) or None
        ),
    }

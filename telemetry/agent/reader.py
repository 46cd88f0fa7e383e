"""Read one sample of one GPU through an NVML module (real ``pynvml`` or the fake).

Per-metric errors are absorbed here: NotSupported/FunctionNotFound/NoPermission mark the metric
unsupported for this GPU (it is never asked again and reported as null); other non-fatal errors
null the metric for this sample only.  Errors that concern the whole GPU or NVML (lost, reset
required, uninitialized, driver gone) propagate to the caller, which turns them into states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .nvml_errors import ARGUMENT_VERSION_MISMATCH, ErrorAction, error_action, error_code

Values = dict[str, int | bool | None]
NvmlModule = Any  # the pynvml module or telemetry.agent.fake.FakeNvml; untyped either way


class GpuReader:
    def __init__(
        self,
        nvml: NvmlModule,
        handle: Any,
        unsupported: set[str],
        note_call: Callable[[str], None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.handle = handle
        self.unsupported = unsupported
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

    def read(self) -> Values:
        nv, h = self.nvml, self.handle
        self.transient = {}
        v: Values = {}
        # Utilization first: on a lost GPU it fails fast and the rest is skipped.
        util = self._q("util", nv.nvmlDeviceGetUtilizationRates, h)
        v["util_gpu"] = util.gpu if util is not None else None
        v["util_mem"] = util.memory if util is not None else None
        mem = self._memory()
        v["mem_used_bytes"] = mem.used if mem is not None else None
        v["mem_total_bytes"] = mem.total if mem is not None else None
        v["power_mw"] = self._q("power", nv.nvmlDeviceGetPowerUsage, h)
        v["energy_mj"] = self._q("energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
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
        return v

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

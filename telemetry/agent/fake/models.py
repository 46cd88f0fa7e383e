"""Per-model capability matrices for the fake NVML.

Each capability names a group of NVML queries; a model without it answers NotSupported, the way
the real driver does (a GeForce card has no serial, no ECC and no row remapper; only Hopper and
newer have GPM; pre-Ampere cards retire pages instead of remapping rows).  The V100 entry also
lacks ``memory_v2`` to exercise the agent's fallback to ``nvmlDeviceGetMemoryInfo`` v1, as seen
on older driver branches, and the driver's utilization sample buffer
(``util_samples``, ``nvmlDeviceGetSamples``): it is the model that exercises the agent's
fallback to instantaneous reads.  The H100 and H200 entries' identity, idle readings and answers are
held to recordings of a real card of each (``tests/agent/fixtures/h100``, ``…/h200``); the
others come from data sheets and the PCI ID list.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024

ALL_CAPS = frozenset(
    {
        "serial",
        "board_part_number",
        "ecc",
        "remapped_rows",
        "retired_pages",
        "memory_v2",
        "energy",
        "pcie_replay",
        "recovery_action",
        "gpm",
        "clocks_event_reasons",
        "xid_events",
        "util_samples",
    }
)


@dataclass(frozen=True, slots=True)
class GpuModel:
    key: str
    name: str
    part_number: str
    memory_total: int  # bytes, as NVML reports it
    power_idle_mw: int
    power_max_mw: int
    sm_clock_idle: int
    sm_clock_max: int
    mem_clock: int
    pci_device_id: int  # nvmlPciInfo_t.pciDeviceId: device id << 16 | vendor id (NVIDIA)
    caps: frozenset[str]
    # What the driver sets aside for itself (nvmlMemory_v2_t.reserved), driver 580; read on an
    # H100 and an H200 only.
    memory_reserved: int = 480 * MIB
    # The driver's utilization sampling period (µs): one buffer sample per period, and what an
    # instantaneous read averages over. 200 ms measured on an H100 and an H200 (driver 580);
    # the others take 1/6 s, the shortest period NVML's documentation names (not measured).
    util_period_us: int = 166_667
    # Samples the driver's ring buffer holds. A modelled value, not measured yet: the H200's
    # 5-s polls lost none, so a real buffer holds at least 25.
    util_buffer_capacity: int = 120

    def has(self, cap: str) -> bool:
        return cap in self.caps


_DATACENTER = ALL_CAPS - {"retired_pages", "gpm"}

MODELS: dict[str, GpuModel] = {
    model.key: model
    for model in (
        GpuModel(
            key="H100-SXM5-80GB",
            name="NVIDIA H100 80GB HBM3",
            part_number="695-2G520-0200-000",
            memory_total=81559 * MIB,
            power_idle_mw=71_000,
            power_max_mw=700_000,
            sm_clock_idle=345,
            sm_clock_max=1980,
            mem_clock=2619,
            pci_device_id=0x233010DE,
            caps=_DATACENTER | {"gpm"},
            util_period_us=200_000,
        ),
        GpuModel(
            key="H200-SXM5-141GB",
            name="NVIDIA H200",
            part_number="692-2G520-0282-000",
            memory_total=143771 * MIB,
            power_idle_mw=78_000,
            power_max_mw=700_000,
            sm_clock_idle=345,
            sm_clock_max=1980,
            mem_clock=3201,
            pci_device_id=0x233510DE,
            caps=_DATACENTER | {"gpm"},
            memory_reserved=615 * MIB + 64 * 1024,
            util_period_us=200_000,
        ),
        GpuModel(
            key="A100-SXM4-80GB",
            name="NVIDIA A100-SXM4-80GB",
            part_number="692-2G506-0210-002",
            memory_total=81920 * MIB,
            power_idle_mw=60_000,
            power_max_mw=400_000,
            sm_clock_idle=210,
            sm_clock_max=1410,
            mem_clock=1593,
            pci_device_id=0x20B210DE,
            caps=_DATACENTER,
        ),
        GpuModel(
            key="L40S",
            name="NVIDIA L40S",
            part_number="900-2G133-0080-000",
            memory_total=46068 * MIB,
            power_idle_mw=32_000,
            power_max_mw=350_000,
            sm_clock_idle=210,
            sm_clock_max=2520,
            mem_clock=9001,
            pci_device_id=0x26B910DE,
            caps=_DATACENTER,
        ),
        GpuModel(
            key="V100-SXM2-32GB",
            name="Tesla V100-SXM2-32GB",
            part_number="900-2G503-0430-000",
            memory_total=32768 * MIB,
            power_idle_mw=40_000,
            power_max_mw=300_000,
            sm_clock_idle=135,
            sm_clock_max=1530,
            mem_clock=877,
            pci_device_id=0x1DB510DE,
            caps=ALL_CAPS
            - {"remapped_rows", "memory_v2", "recovery_action", "gpm", "util_samples"},
        ),
        GpuModel(
            key="RTX-4090",
            name="NVIDIA GeForce RTX 4090",
            part_number="",
            memory_total=24564 * MIB,
            power_idle_mw=20_000,
            power_max_mw=450_000,
            sm_clock_idle=210,
            sm_clock_max=2520,
            mem_clock=10501,
            pci_device_id=0x268410DE,
            caps=frozenset(
                {
                    "memory_v2",
                    "energy",
                    "pcie_replay",
                    "clocks_event_reasons",
                    "xid_events",
                    "util_samples",
                }
            ),
        ),
    )
}


def model(key: str) -> GpuModel:
    try:
        return MODELS[key]
    except KeyError:
        raise ValueError(f"unknown fake GPU model {key!r}; known: {sorted(MODELS)}") from None

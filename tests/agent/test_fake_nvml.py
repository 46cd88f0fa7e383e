"""The fake must behave like pynvml where the agent can tell the difference."""

import threading

import pynvml
import pytest

from telemetry.agent.clock import FakeClock
from telemetry.agent.fake import FakeGpu, FakeNvml, load_scenario
from telemetry.agent.fake.models import model

from .conftest import START


def make(*keys: str, clock: FakeClock | None = None) -> tuple[FakeNvml, FakeClock]:
    clock = clock or FakeClock(START)
    gpus = [FakeGpu(slot=i, model=model(k), bus=0x18 + i, seed=1) for i, k in enumerate(keys)]
    fake = FakeNvml(clock, gpus)
    fake.nvmlInit()
    return fake, clock


def test_constants_structs_and_errors_are_pynvml_s_own():
    fake, _ = make("H100-SXM5-80GB")
    assert fake.NVMLError is pynvml.NVMLError
    assert fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert fake.nvmlMemory_v2 == pynvml.nvmlMemory_v2
    assert fake.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == 230
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    assert isinstance(
        fake.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2), pynvml.c_nvmlMemory_v2_t
    )
    assert fake.nvmlDeviceGetPciInfo(h).busId == "00000000:18:00.0"  # pynvml decodes c_char
    assert isinstance(fake.nvmlDeviceGetUUID(h), str)  # as real: str from string getters
    with pytest.raises(AttributeError):
        getattr(fake, "nvmlDeviceGetGpcClkVfOffset")  # noqa: B009 - not implemented: no real lib


def test_errors_map_to_the_real_subclasses():
    fake, _ = make("H100-SXM5-80GB")
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.lose_gpu(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as lost:
        fake.nvmlDeviceGetPowerUsage(h)
    assert lost.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    assert "Xid (PCI:0000:18:00): 79" in fake.kernel_log.lines[-1]


def test_uninitialized_before_init():
    clock = FakeClock(START)
    fake = FakeNvml(clock, [FakeGpu(slot=0, model=model("A100-SXM4-80GB"), bus=0x18, seed=1)])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_capability_matrix():
    fake, _ = make("RTX-4090", "H100-SXM5-80GB", "V100-SXM2-32GB")
    geforce, hopper, volta = (fake.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    for call, args in (
        (fake.nvmlDeviceGetSerial, ()),
        (fake.nvmlDeviceGetTotalEccErrors, (1, 1)),
        (fake.nvmlDeviceGetRemappedRows, ()),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(geforce, *args)
    assert fake.nvmlDeviceGetRemappedRows(hopper) == (0, 0, 0, 0)
    assert fake.nvmlDeviceGetRetiredPages(volta, 0) == []
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRemappedRows(volta)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetMemoryInfo(volta, version=pynvml.nvmlMemory_v2)
    assert fake.nvmlDeviceGetMemoryInfo(volta).total == 32768 * 1024 * 1024
    fields = fake.nvmlDeviceGetFieldValues(geforce, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    assert fields[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert "gpm" in model("H100-SXM5-80GB").caps and "gpm" not in model("A100-SXM4-80GB").caps


def test_energy_rises_with_power_times_time():
    fake, clock = make("H100-SXM5-80GB")
    h = fake.nvmlDeviceGetHandleByIndex(0)
    e0 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    p0 = fake.nvmlDeviceGetPowerUsage(h)
    clock.advance(5)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == p0 * 5  # mW * s = mJ


def test_driver_reload_zeroes_counters_and_needs_reinit():
    fake, clock = make("H100-SXM5-80GB")
    h = fake.nvmlDeviceGetHandleByIndex(0)
    clock.advance(3600)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) > 0
    assert fake.nvmlDeviceGetPcieReplayCounter(h) == 2
    fake.driver_reload()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetPowerUsage(h)
    fake.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetPowerUsage(h)  # a handle from before the reload is stale
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) == 0
    assert fake.nvmlDeviceGetPcieReplayCounter(h) == 0


def test_xid_reaches_event_sets_and_the_kernel_log():
    fake, _ = make("H100-SXM5-80GB")
    h = fake.nvmlDeviceGetHandleByIndex(0)
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(es, 0)
    fake.inject_xid(0, 94)
    data = fake.nvmlEventSetWait_v2(es, 0)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 94)
    assert "): 94," in fake.kernel_log.lines[-1]
    assert fake.nvmlDeviceGetRemappedRows(h)[1:3] == (1, 1)  # the ECC error left its marks


def test_transient_errors_and_hangs():
    fake, _ = make("H100-SXM5-80GB")
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.fail_next(0, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(pynvml.NVMLError_Unknown):
        fake.nvmlDeviceGetPowerUsage(h)
    assert fake.nvmlDeviceGetPowerUsage(h) > 0
    fake.hang(0, "nvmlDeviceGetTemperature")
    done = threading.Event()

    def read() -> None:
        fake.nvmlDeviceGetTemperature(h, 0)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert not done.wait(0.05)
    fake.release_hangs()
    assert done.wait(1)


def test_scenarios_ship_and_schedule_faults():
    scenario = load_scenario("h100x8-gpu-lost")
    clock = FakeClock(scenario.start)
    fake = scenario.build(clock)
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 8
    h3 = fake.nvmlDeviceGetHandleByIndex(3)
    clock.advance(12 * 60 - 1)
    assert fake.nvmlDeviceGetPowerUsage(h3) > 0
    clock.advance(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(h3)
    mixed = load_scenario("mixed")
    assert [g["model"] for g in mixed.gpus] == ["A100-SXM4-80GB", "RTX-4090", "V100-SXM2-32GB"]


def test_scenario_identities_are_what_the_built_node_reports(tmp_path):
    scenario = load_scenario("mixed")
    scenario.gpus = [*scenario.gpus, {"model": "H200-SXM5-141GB", "count": 1}]
    fake = scenario.build(FakeClock(START), str(tmp_path / "kmsg"))
    fake.nvmlInit()
    reported = []
    for index in range(fake.nvmlDeviceGetCount()):
        handle = fake.nvmlDeviceGetHandleByIndex(index)
        try:
            serial = fake.nvmlDeviceGetSerial(handle)
        except pynvml.NVMLError_NotSupported:
            serial = ""  # a GeForce card has none, and identities() says so too
        reported.append(
            (index, fake.nvmlDeviceGetUUID(handle), serial, fake.nvmlDeviceGetName(handle))
        )
    assert scenario.identities() == reported
    assert "" in [serial for _, _, serial, _ in reported]  # the mix includes a GeForce
    assert reported[-1][3] == "NVIDIA H200"

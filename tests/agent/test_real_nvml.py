"""The fake H100 and H200 answer the agent's calls the way a real card of each did
(tests/agent/fixtures/h100, …/h200), and the agent turns each card's recorded answers into the
windows it sent."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from telemetry.agent.agent import AgentConfig
from telemetry.agent.clock import FakeClock
from telemetry.agent.fake import FakeGpu, FakeNvml
from telemetry.agent.fake.models import model
from telemetry.agent.kmsg import pci_key
from telemetry.agent.timefmt import parse_rfc3339

from .conftest import START
from .helpers import events_of, spooled_docs, windows_of
from .replay import FIXTURES, ReplayNvml, recorded_batches, recorded_calls, recorded_memory


@dataclass(frozen=True)
class Card:
    fixture: str  # its folder under fixtures/
    model: str  # the fake's model of it
    part_number: str
    seconds: int  # how long the recorded run lasted


CARDS = (
    Card("h100", "H100-SXM5-80GB", "695-2G520-0200-000", seconds=250),
    Card("h200", "H200-SXM5-141GB", "692-2G520-0282-000", seconds=200),
)


@pytest.fixture(params=CARDS, ids=lambda card: card.fixture)
def card(request: pytest.FixtureRequest) -> Card:
    return request.param  # type: ignore[no-any-return]


def recorded(card: Card, fn: str, *args: Any) -> dict[str, Any]:
    """The first recorded call of `fn` whose arguments after the handle are `args`."""
    for entry in recorded_calls(card.fixture):
        if entry["fn"] == fn and (not args or tuple(entry["args"][1:]) == args):
            return entry
    raise AssertionError(f"the {card.fixture} recording has no {fn}{args}")


def idle_fake(card: Card, clock: FakeClock | None = None) -> tuple[FakeNvml, Any]:
    gpu = FakeGpu(slot=0, model=model(card.model), bus=0x06, seed=1, busy=0.0)
    gpu.pinned = {"util_gpu": 0}
    fake = FakeNvml(clock or FakeClock(START), [gpu])
    fake.nvmlInit()
    return fake, fake.nvmlDeviceGetHandleByIndex(0)


def outcome(fake: FakeNvml, handle: Any, event_set: Any, entry: dict[str, Any]) -> str:
    """Call what `entry` recorded on the fake: 'ok' or the error class's name."""

    def arg(value: Any) -> Any:
        if isinstance(value, dict) and "handle" in value:
            return handle
        if isinstance(value, dict) and "pointer" in value:
            return event_set
        return value

    fn = getattr(fake, entry["fn"])
    try:
        result = fn(*map(arg, entry["args"]), **entry.get("kwargs", {}))
    except pynvml.NVMLError as exc:
        return type(exc).__name__
    if entry["fn"] == "nvmlDeviceGetFieldValues":  # per-field status inside a success
        return "ok" if result[0].nvmlReturn == pynvml.NVML_SUCCESS else "field-error"
    return "ok"


def test_every_recording_is_tested():
    # The ground-truth runs (``*-truth``) are the batches of scripts/gpu_truth.py, with no NVML
    # call log: tests/scripts and tests/telemetry/test_real_nvml_batches.py test those.
    captures = [p.name for p in FIXTURES.iterdir() if not p.name.endswith("-truth")]
    assert sorted(c.fixture for c in CARDS) == sorted(captures)


def test_every_call_the_agent_made_gets_the_same_kind_of_answer_from_the_fake(card: Card):
    fake, handle = idle_fake(card)
    event_set = fake.nvmlEventSetCreate()
    seen: dict[str, str] = {}
    for entry in recorded_calls(card.fixture):
        if entry["fn"] in ("nvmlInit", "nvmlShutdown"):
            continue
        key = json.dumps([entry["fn"], entry["args"][1:], entry.get("kwargs")], sort_keys=True)
        real = entry.get("error", "ok")
        if entry["fn"] == "nvmlDeviceGetFieldValues" and real == "ok":
            real = "ok" if entry["result"][0]["nvmlReturn"] == 0 else "field-error"
        seen.setdefault(key, real)
        assert outcome(fake, handle, event_set, entry) == real, key
    # The agent asked for every metric it knows; Hopper has no retired pages (rows remap).
    assert len(seen) >= 20
    assert seen[next(k for k in seen if "nvmlDeviceGetRetiredPages" in k)] == (
        "NVMLError_NotSupported"
    )


def test_the_fake_identifies_itself_like_the_real_card(card: Card):
    fake, h = idle_fake(card)
    assert fake.nvmlDeviceGetName(h) == recorded(card, "nvmlDeviceGetName")["result"]
    part = recorded(card, "nvmlDeviceGetBoardPartNumber")["result"]
    assert fake.nvmlDeviceGetBoardPartNumber(h) == part == card.part_number
    uuid_form = re.compile(r"^GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
    assert uuid_form.match(recorded(card, "nvmlDeviceGetUUID")["result"])
    assert uuid_form.match(fake.nvmlDeviceGetUUID(h))
    serial_form = re.compile(r"^\d{13}$")
    assert serial_form.match(recorded(card, "nvmlDeviceGetSerial")["result"])
    assert serial_form.match(fake.nvmlDeviceGetSerial(h))
    real_pci, fake_pci = (
        recorded(card, "nvmlDeviceGetPciInfo")["result"],
        fake.nvmlDeviceGetPciInfo(h),
    )
    bus_form = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
    for pci in (real_pci, {"busId": fake_pci.busId, "busIdLegacy": fake_pci.busIdLegacy}):
        assert bus_form.match(pci["busId"]) and pci["busIdLegacy"] == pci["busId"][4:]
    assert fake_pci.pciDeviceId == real_pci["pciDeviceId"]
    # The kernel log names the card "PCI:0000:00:06" (each VM put it on bus 0, device 6):
    # both forms meet in one key.
    assert pci_key(real_pci["busId"]) == pci_key("0000:00:06") == (0, 0, 6)
    supported = recorded(card, "nvmlDeviceGetSupportedEventTypes")["result"]
    xid = pynvml.nvmlEventTypeXidCriticalError
    assert fake.nvmlDeviceGetSupportedEventTypes(h) & xid == supported & xid == xid
    assert recorded(card, "nvmlDeviceRegisterEvents")["args"][1] == xid


def test_an_idle_fake_reads_like_the_idle_real_card(card: Card):
    clock = FakeClock(START)
    fake, h = idle_fake(card, clock)
    real_mem = recorded(card, "nvmlDeviceGetMemoryInfo")["result"]
    mem = fake.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert (mem.total, mem.used, mem.reserved) == (
        real_mem["total"],
        real_mem["used"],
        real_mem["reserved"],
    )
    assert mem.free == real_mem["free"]
    v1, real_v1 = fake.nvmlDeviceGetMemoryInfo(h), recorded_memory(card.fixture)["idle"]["v1"]
    assert (v1.total, v1.used, v1.free) == (real_v1["total"], real_v1["used"], real_v1["free"])
    assert (
        fake.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        == recorded(card, "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM)["result"]
    )
    assert (
        fake.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        == recorded(card, "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM)["result"]
    )
    reasons = recorded(card, "nvmlDeviceGetCurrentClocksEventReasons")["result"]
    assert reasons == pynvml.nvmlClocksEventReasonGpuIdle
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(h) == reasons
    real_c = recorded(card, "nvmlDeviceGetTemperature", pynvml.NVML_TEMPERATURE_GPU)["result"]
    assert abs(fake.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) - real_c) <= 5
    assert fake.nvmlDeviceGetRemappedRows(h) == tuple(
        recorded(card, "nvmlDeviceGetRemappedRows")["result"]
    )
    field = recorded(card, "nvmlDeviceGetFieldValues")["result"][0]
    got = fake.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
    assert (got.valueType, got.value.uiVal) == (field["valueType"], field["value"]["uiVal"])
    # Power over the first idle minute: the fake's samples jitter by ±2 W, the real ones drift
    # by a few tenths, so the means are compared.
    calls = recorded_calls(card.fixture)
    real_mw = [e["result"] for e in calls if e["fn"] == "nvmlDeviceGetPowerUsage"][:12]
    assert max(real_mw) - min(real_mw) < 1_000
    fake_mw = []
    for i in range(12):
        clock.set(START + 5 * i)
        fake_mw.append(fake.nvmlDeviceGetPowerUsage(h))
    assert abs(statistics.mean(fake_mw) - statistics.mean(real_mw)) <= 1_000  # within 1 W


def test_v1_counts_the_reservation_as_used_on_the_fake_as_on_the_real_card(card: Card):
    """The agent asks for v2 and falls back to v1 on old drivers: the two must differ by the
    reservation, on a busy card too (the real one held 1 GiB for another process)."""
    real = recorded_memory(card.fixture)["holding_1_gib"]
    assert real["v1"]["used"] == real["v2"]["used"] + real["v2"]["reserved"]
    assert real["v1"]["free"] == real["v2"]["free"]
    gpu = FakeGpu(slot=0, model=model(card.model), bus=0x06, seed=1, busy=1.0)
    fake = FakeNvml(FakeClock(START), [gpu])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    v1, v2 = (
        fake.nvmlDeviceGetMemoryInfo(h),
        fake.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
    )
    assert v2.used > 0 and v2.reserved == real["v2"]["reserved"]
    assert v1.used == v2.used + v2.reserved and v1.free == v2.free


def schema_2(card: Card, began: float, sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded (schema 1) windows as today's agent sends them from the same answers.

    The recorded agent read utilization instantaneously (the recording has no buffer calls),
    so the values stay and `util_method` is "instant". Observed spans: the first window from
    the agent's first 5-s slot, the exit window to the second the run stopped, the others
    whole. Energy: a window observed to its minute's end holds the counter at that end,
    interpolated between the reads around it; on the replay's clock the first read after the
    end is at the end itself, so it is that read: the recorded counter of the next window's
    first sample (the k-th energy read is the k-th sample; all samples of the run were ok).
    """
    reads = [
        e["result"]
        for e in recorded_calls(card.fixture)
        if e["fn"] == "nvmlDeviceGetTotalEnergyConsumption"
    ]
    assert len(reads) == sum(w["samples_ok"] for w in sent)
    stop = began + card.seconds
    first_slot = math.ceil(began / 5) * 5
    out, done = [], 0
    for i, w in enumerate(sent):
        start = parse_rfc3339(w["window_start"])
        done += w["samples_ok"]
        last = i == len(sent) - 1
        observed_from = int(first_slot - start) if i == 0 else 0
        observed_to = math.ceil(stop - start) if last else 60
        energy = w["energy_mj"] if last else reads[done]
        out.append(
            {
                **w,
                "observed_from": observed_from,
                "observed_to": observed_to,
                "util_method": "instant",
                "energy_mj": energy,
            }
        )
    return out


def test_the_agent_turns_the_recorded_answers_into_the_recorded_windows(
    card: Card, make_node, clock
):
    """The agent, on a clock that starts when the recording did, fed the real card's answers
    in order, seals the same windows and events the real run sent: the readers and the
    window aggregation hold on real values, not only on the fake's. Schema 2 adds the
    observed span and the method and moves the energy counter to the minute's end
    (`schema_2`)."""
    sent = recorded_batches(card.fixture)
    calls = recorded_calls(card.fixture)
    began = parse_rfc3339(sent[0]["sealed_at"])  # the first tick: init, enumerate, appear
    clock.set(began)
    node = make_node(fake=ReplayNvml(calls), kmsg=False, config=AgentConfig(hostname="vm"))
    node.run_until(began + card.seconds)
    node.close()
    docs = spooled_docs(str(node.tmp / "spool.db"))

    assert windows_of(docs) == schema_2(card, began, [w for b in sent for w in b["windows"]])
    ours = [{k: v for k, v in e.items() if k != "event_id"} for e in events_of(docs)]
    theirs = [{k: v for k, v in e.items() if k != "event_id"} for b in sent for e in b["events"]]
    assert ours == theirs
    driver = recorded(card, "nvmlSystemGetDriverVersion")["result"]
    assert {d["agent"]["driver_version"] for d in docs} == {driver} == {"580.159.04"}

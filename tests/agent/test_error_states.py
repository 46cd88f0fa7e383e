"""Every NVML error mapping, driven through the agent by the fake NVML."""

from typing import Any

import pynvml

from telemetry.agent.agent import AgentConfig
from telemetry.agent.clock import FakeClock
from telemetry.agent.fake import FakeGpu, FakeNvml
from telemetry.agent.fake.models import model

from .conftest import START
from .helpers import events_of, spooled_docs, windows_of


def one_gpu(clock: FakeClock, key: str) -> FakeNvml:
    return FakeNvml(clock, [FakeGpu(slot=0, model=model(key), bus=0x18, seed=5)])


def docs(node: Any) -> list[dict[str, Any]]:
    return spooled_docs(str(node.tmp / "spool.db"))


def at(windows: list[dict[str, Any]], minute: int) -> dict[str, Any]:
    (w,) = [w for w in windows if w["window_start"] == f"2026-11-21T10:{minute:02d}:00Z"]
    return w


def test_not_supported_is_remembered_reported_null_and_never_asked_again(make_node, clock):
    fake = one_gpu(clock, "RTX-4090")
    node = make_node(fake=fake)
    node.run_until(START + 180)
    w = at(windows_of(docs(node)), 1)
    assert (w["samples_ok"], w["state"]) == (12, "up")
    for name in ("ecc_corrected", "ecc_uncorrected", "remapped_rows_pending", "retired_pages"):
        assert w[name] is None
    assert w["recovery_action"] is None
    assert w["util_gpu"] is not None
    # Asked once (first sample), never again in 36 samples and 3 enumerations.
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 2
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 1
    assert fake.calls["nvmlDeviceGetSerial"] == 1
    (gpu,) = docs(node)[0]["gpus"]
    assert gpu["serial"] is None and gpu["board_part_number"] is None


def test_function_not_found_falls_back_to_memory_info_v1(make_node, clock):
    fake = one_gpu(clock, "V100-SXM2-32GB")
    node = make_node(fake=fake)
    node.run_until(START + 120)
    w = at(windows_of(docs(node)), 1)
    assert w["mem_total_bytes"] == 32768 * 1024 * 1024
    assert w["mem_used_bytes"]["max"] > 0
    assert w["retired_pages"] == 0 and w["remapped_rows_pending"] is None
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 25  # samples at 0, 5, ..., 120 s


def test_gpu_is_lost_means_down_with_events_dated_when_it_happened(make_node, clock):
    node = make_node("h100x8-gpu-lost")
    node.run_until(START + 15 * 60)
    d = docs(node)
    lost = node.fake.gpus[3]
    (event,) = events_of(d, "gpu_lost")
    assert (event["gpu_uuid"], event["occurred_at"]) == (lost.uuid, "2026-11-21T10:12:00.000Z")
    assert event["detail"] == {"reason": "gpu_is_lost"}
    (xid,) = [e for e in events_of(d, "xid") if e["xid"] == 79]
    assert xid["gpu_uuid"] == lost.uuid and xid["detail"]["source"] == "kmsg"
    assert xid["detail"]["severity"] == "down"
    ws = windows_of(d, lost.uuid)
    assert [(w["samples_ok"], w["state"]) for w in ws[:12]] == [(12, "up")] * 12
    for minute in (12, 13, 14):
        w = at(ws, minute)
        assert (w["samples_ok"], w["samples_expected"], w["state"]) == (0, 12, "down")
        assert w["state_reason"] == "gpu_is_lost"
    assert all(w["state"] == "up" for w in windows_of(d) if w["gpu_uuid"] != lost.uuid
               and w["gpu_uuid"] != node.fake.gpus[5].uuid)  # fmt: skip


def test_reset_required_then_recovered(make_node, clock):
    fake = one_gpu(clock, "A100-SXM4-80GB")
    node = make_node(fake=fake)
    fake.at(START + 62, lambda f: f.require_reset(0))
    fake.at(START + 150, lambda f: f.recover_gpu(0))
    node.run_until(START + 240)
    d = docs(node)
    w1, w2 = at(windows_of(d), 1), at(windows_of(d), 2)
    assert (w1["samples_ok"], w1["state"], w1["state_reason"]) == (1, "down", "reset_required")
    assert (w2["samples_ok"], w2["state"]) == (6, "down")  # 10:02:30 onwards read fine again
    assert at(windows_of(d), 3)["state"] == "up"
    (lost,) = events_of(d, "gpu_lost")
    (back,) = events_of(d, "gpu_recovered")
    assert lost["occurred_at"] == "2026-11-21T10:01:05.000Z"
    assert back["occurred_at"] == "2026-11-21T10:02:30.000Z"
    assert back["detail"] == {"from": "reset_required", "down_s": 85.0}


def test_uninitialized_reinitialises_and_counters_restart(make_node, clock):
    fake = one_gpu(clock, "H100-SXM5-80GB")
    fake.gpus[0].pinned["power_mw"] = 100_000  # 100 W flat: energy is exactly 100 J/s
    node = make_node(fake=fake)
    fake.at(START + 90, lambda f: f.driver_reload())
    node.run_until(START + 240)
    ws = windows_of(docs(node))
    assert [w["samples_ok"] for w in ws] == [12, 11, 12, 12]  # one sample hit Uninitialized
    assert fake.calls["nvmlInit"] == 2
    # The counter at each minute's end: 60 s since load, then 30 s since the reload at
    # 10:01:30 (the reads around 10:02:00 are both after the reload).
    assert [w["energy_mj"] for w in ws[:2]] == [6_000_000, 3_000_000]
    assert all(w["state"] == "up" for w in ws)


def test_nvml_unavailable_at_start_is_a_node_event_retried_with_backoff(make_node, clock):
    fake = one_gpu(clock, "H100-SXM5-80GB")
    fake.set_unavailable(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    fake.at(START + 20, lambda f: f.set_unavailable(None))
    node = make_node(fake=fake)
    node.run_until(START + 120)
    assert fake.calls["nvmlInit"] == 6  # t = 0, 1, 3, 7, 15, 31 s
    d = docs(node)
    (down,) = events_of(d, "nvml_unavailable")
    assert down["gpu_uuid"] is None and down["occurred_at"] == "2026-11-21T10:00:00.000Z"
    assert down["detail"]["error"] == "NVMLError_LibraryNotFound"
    (up,) = events_of(d, "nvml_available")
    assert up["occurred_at"] == "2026-11-21T10:00:31.000Z" and up["detail"] == {"after_s": 31.0}
    w = at(windows_of(d), 0)
    assert (w["samples_ok"], w["samples_expected"]) == (5, 5)  # 10:00:35 to 10:00:55


def test_known_gpus_are_down_while_the_driver_is_missing(make_node, clock, tmp_path):
    first = make_node(fake=one_gpu(clock, "H100-SXM5-80GB"))
    first.run_until(START + 60)
    first.close()
    fake = one_gpu(clock, "H100-SXM5-80GB")
    fake.set_unavailable(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    # Same spool: the agent remembers the GPU from its earlier run.
    again = make_node(fake=fake)
    again.spool.close()
    from telemetry.agent.agent import Agent
    from telemetry.agent.spool import Spool

    again.spool = Spool(str(first.tmp / "spool.db"), clock=clock)
    again.agent = Agent(nvml=fake, clock=clock, spool=again.spool, config=again.config)
    again.run_until(START + 180)
    ws = windows_of(spooled_docs(str(first.tmp / "spool.db")))
    w = at(ws, 2)
    assert (w["samples_ok"], w["state"], w["state_reason"]) == (0, "down", "nvml_unavailable")


def test_a_hung_call_is_a_stall_event_and_down_not_a_hang(make_node, clock):
    config = AgentConfig(hostname="n", sample_timeout_s=0.05)
    node = make_node("h100x8", config=config)
    node.fake.hang(2, "nvmlDeviceGetTemperature")
    node.fake.at(START + 52, lambda f: f.release_hangs())
    node.run_until(START + 130)
    d = docs(node)
    stalled = node.fake.gpus[2].uuid
    (stall,) = events_of(d, "nvml_stall")
    assert stall["gpu_uuid"] == stalled
    assert stall["detail"] == {"call": "nvmlDeviceGetTemperature", "timeout_s": 0.05}
    w0 = at(windows_of(d, stalled), 0)
    assert (w0["state"], w0["state_reason"]) == ("down", "nvml_stall")
    assert at(windows_of(d, stalled), 1)["state"] == "up"
    (back,) = events_of(d, "gpu_recovered")
    assert back["gpu_uuid"] == stalled and back["detail"]["from"] == "nvml_stall"
    others = [w for w in windows_of(d) if w["gpu_uuid"] != stalled]
    assert all((w["samples_ok"], w["state"]) == (12, "up") for w in others)


def test_transient_error_nulls_one_metric_for_one_sample_only(make_node, clock):
    fake = one_gpu(clock, "H100-SXM5-80GB")
    fake.fail_next(0, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, count=2)
    node = make_node(fake=fake)
    node.run_until(START + 60)
    (w,) = windows_of(docs(node))
    assert (w["samples_ok"], w["state"]) == (12, "up")
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 13  # still asked at every slot to 10:01:00
    snaps = [fake.gpus[0].snapshot(START + 5 * i) for i in range(2, 12)]
    assert w["power_w"]["max"] == max(s.power_mw for s in snaps) / 1000


def test_xid_from_nvml_events_only_flushes_within_seconds(make_node, clock):
    node = make_node("h100x8", kmsg=False)
    node.fake.at(START + 21.5, lambda f: f.inject_xid(4, 94))
    node.run_until(START + 24)
    (xid,) = events_of(docs(node), "xid")
    assert xid["xid"] == 94 and xid["gpu_uuid"] == node.fake.gpus[4].uuid
    assert xid["detail"] == {
        "severity": "degraded",
        "name": "Contained ECC error",
        "source": "nvml",
    }
    node.run_until(START + 61)
    w = at(windows_of(docs(node), node.fake.gpus[4].uuid), 0)
    assert w["state"] == "degraded"


def test_xid_seen_by_nvml_and_kernel_log_is_reported_once(make_node, clock):
    node = make_node("h100x8")
    node.fake.at(START + 30, lambda f: f.inject_xid(1, 13))
    node.run_until(START + 40)
    (xid,) = events_of(docs(node), "xid")
    assert xid["xid"] == 13 and xid["detail"]["severity"] == "app"


def test_missing_and_appeared_gpus(make_node, clock):
    scenario_fake = one_gpu(clock, "A100-SXM4-80GB")
    scenario_fake.add_gpu(FakeGpu(slot=1, model=model("A100-SXM4-80GB"), bus=0x2A, seed=5))
    node = make_node(fake=scenario_fake)
    scenario_fake.at(START + 100, lambda f: f.remove_gpu(1))
    node.run_until(START + 200)
    d = docs(node)
    assert len(events_of(d, "gpu_appeared")) == 2
    (missing,) = events_of(d, "gpu_missing")
    assert missing["gpu_uuid"] == scenario_fake.gpus[1].uuid
    assert missing["occurred_at"] == "2026-11-21T10:02:00.000Z"  # found at the next enumeration
    w = at(windows_of(d, missing["gpu_uuid"]), 2)
    assert (w["state"], w["state_reason"]) == ("down", "gpu_missing")

"""Window aggregation, exact to the sample."""

from fractions import Fraction
from typing import Any

from telemetry.agent.windows import WindowBuilder, health_from_values, window_start

from .conftest import START
from .helpers import spooled_docs, windows_of


def values(**kw: Any) -> dict[str, Any]:
    base = dict.fromkeys(
        [
            "util_gpu", "util_mem", "mem_used_bytes", "mem_total_bytes", "power_mw", "energy_mj",
            "temp_c", "clock_sm_mhz", "clock_mem_mhz", "throttle_reasons", "ecc_corrected",
            "ecc_uncorrected", "remapped_rows_correctable", "remapped_rows_uncorrectable",
            "remapped_rows_pending", "remapped_rows_failure", "retired_pages",
            "retired_pages_pending", "pcie_replays", "recovery_action",
        ]
    )  # fmt: skip
    base.update(kw)
    return base


def test_gauges_counters_and_bitmask():
    w = WindowBuilder("GPU-x", int(START))
    utils = [0, 100, 50, 7, 93, 12, 64, 88, 1, 99, 42, 30]
    for i, util in enumerate(utils):
        w.expect()
        w.add(
            values(
                util_gpu=util,
                power_mw=300_000 + i * 1_001,
                energy_mj=1_000_000 + i * 1_500_000,
                throttle_reasons=1 << (i % 3),
                mem_used_bytes=1000 + i,
                pcie_replays=i // 4,
            ),
            "up",
            None,
        )
    doc = w.wire()
    assert doc["window_start"] == "2026-11-21T10:00:00Z"
    assert (doc["samples_ok"], doc["samples_expected"], doc["state"], doc["state_reason"]) == (
        12, 12, "up", None,
    )  # fmt: skip
    assert doc["util_gpu"] == {"min": 0, "avg": 48.833, "max": 100}  # 586 / 12
    # mean 305505.5 mW rounds half-to-even to 305506 mW
    assert doc["power_w"] == {"min": 300.0, "avg": 305.506, "max": 311.011}
    assert doc["energy_mj"] == 1_000_000 + 11 * 1_500_000
    assert doc["throttle_reasons"] == 0b111
    assert doc["mem_used_bytes"] == {"min": 1000, "avg": 1006, "max": 1011}  # 1005.5 -> 1006
    assert doc["pcie_replays"] == 2
    assert doc["util_mem"] is None and doc["ecc_corrected"] is None  # never read: null


def test_missed_slots_unsupported_values_and_states():
    w = WindowBuilder("GPU-x", 0)
    for _ in range(12):
        w.expect()
    w.add(values(util_gpu=10), "up", None)
    w.add(values(util_gpu=20, remapped_rows_pending=True), "degraded", "row_remap_pending")
    w.note_state("down", "xid:79")
    w.note_state("degraded", "xid:94")  # not worse than down: ignored
    doc = w.wire()
    assert (doc["samples_ok"], doc["samples_expected"]) == (2, 12)
    assert (doc["state"], doc["state_reason"]) == ("down", "xid:79")
    assert doc["util_gpu"] == {"min": 10, "avg": 15.0, "max": 20}
    assert doc["remapped_rows_pending"] is True


def test_no_successful_read_means_down():
    w = WindowBuilder("GPU-x", 0)
    w.expect()
    assert (w.wire()["state"], w.wire()["state_reason"]) == ("down", "no_samples")


def test_health_from_values():
    assert health_from_values(values(recovery_action=0)) == ("up", None)
    assert health_from_values(values(recovery_action=1)) == ("down", "recovery_action:GPU_RESET")
    assert health_from_values(values(recovery_action=4, remapped_rows_failure=True)) == (
        "degraded",
        "recovery_action:DRAIN_AND_RESET",
    )
    assert health_from_values(values(retired_pages_pending=True)) == (
        "degraded",
        "retired_pages_pending",
    )
    assert window_start(START + 59.9) == START


def test_windows_from_the_fake_match_what_the_fake_returned_at_each_slot(make_node, clock):
    node = make_node("h100x8")
    node.run_until(START + 120)
    docs = spooled_docs(str(node.tmp / "spool.db"))
    gpu = node.fake.gpus[2]
    (w,) = [x for x in windows_of(docs, gpu.uuid) if x["window_start"] == "2026-11-21T10:01:00Z"]
    slots = [START + 60 + 5 * i for i in range(12)]
    snaps = [gpu.snapshot(t) for t in slots]
    utils = [s.util_gpu for s in snaps]
    powers = [s.power_mw for s in snaps]
    assert (w["samples_ok"], w["samples_expected"], w["state"]) == (12, 12, "up")
    assert w["util_gpu"] == {
        "min": min(utils),
        "avg": float(round(Fraction(sum(utils), 12), 3)),
        "max": max(utils),
    }
    assert w["power_w"] == {
        "min": min(powers) / 1000,
        "avg": round(Fraction(sum(powers), 12)) / 1000,
        "max": max(powers) / 1000,
    }
    assert w["temp_c"]["max"] == max(s.temp_c for s in snaps)
    # The energy counter integrates the power seen at each sample over the next 5 s.
    energy = sum(gpu.snapshot(t).power_mw * 5 for t in range(int(START), int(slots[-1]), 5))
    assert w["energy_mj"] == energy
    throttle = 0
    for s in snaps:
        throttle |= s.reasons
    assert w["throttle_reasons"] == throttle
    assert w["mem_total_bytes"] == 81559 * 1024 * 1024
    assert w["remapped_rows_pending"] is False and w["recovery_action"] == 0
    assert w["retired_pages"] is None  # Hopper remaps rows; it does not retire pages

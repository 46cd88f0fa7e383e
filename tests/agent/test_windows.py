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
        w.look(START + 5 * i, 5)
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
    assert (doc["observed_from"], doc["observed_to"]) == (0, 60)
    assert doc["util_gpu"] == {"min": 0, "avg": 48.833, "max": 100}  # 586 / 12
    assert doc["util_method"] == "instant"  # not a buffered window: one read per slot
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
    w.look(20, 5)
    w.look(25, 5)  # the other ten slots passed unsampled (overslept): not looks
    w.add(values(util_gpu=10), "up", None)
    w.add(values(util_gpu=20, remapped_rows_pending=True), "degraded", "row_remap_pending")
    w.note_state("down", "xid:79")
    w.note_state("degraded", "xid:94")  # not worse than down: ignored
    doc = w.wire()
    assert (doc["samples_ok"], doc["samples_expected"]) == (2, 12)
    assert (doc["observed_from"], doc["observed_to"]) == (20, 30)
    assert (doc["state"], doc["state_reason"]) == ("down", "xid:79")
    assert doc["util_gpu"] == {"min": 10, "avg": 15.0, "max": 20}
    assert doc["remapped_rows_pending"] is True


def test_no_successful_read_means_down():
    w = WindowBuilder("GPU-x", 0)
    w.expect()
    w.look(0, 5)
    assert (w.wire()["state"], w.wire()["state_reason"]) == ("down", "no_samples")
    assert (w.wire()["util_gpu"], w.wire()["util_method"]) == (None, None)


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
    powers = [s.power_mw for s in snaps]
    assert (w["samples_ok"], w["samples_expected"], w["state"]) == (12, 12, "up")
    assert (w["observed_from"], w["observed_to"], w["util_method"]) == (0, 60, "buffer")
    # Utilization: the driver's samples, each covering the 200 ms before its stamp, weighted
    # by how much of 10:01:00-10:02:00 they cover. The last one ends before the minute does
    # (the next is written after the read at 10:02:00): that bit is left out of the mean.
    lo, hi = int(START + 60) * 1_000_000, int(START + 120) * 1_000_000
    period, phase = gpu.model.util_period_us, gpu.util_phase_us
    stamps = range(phase + ((lo - phase) // period + 1) * period, hi + 1, period)
    assert stamps[-1] <= hi < stamps[-1] + period  # read at 10:02:00 exactly
    pieces = [(max(t - period, lo), t, gpu.sample_value(t)[0]) for t in stamps]
    total = sum(v * (b - a) for a, b, v in pieces)
    length = sum(b - a for a, b, _ in pieces)
    values = [v for _, _, v in pieces]
    assert w["util_gpu"] == {
        "min": min(values),
        "avg": float(round(Fraction(total, length), 3)),
        "max": max(values),
    }
    # An instantaneous read would have seen each slot's second only.
    utils = [s.util_gpu for s in snaps]
    assert w["util_gpu"]["avg"] != float(round(Fraction(sum(utils), 12), 3))
    assert w["power_w"] == {
        "min": min(powers) / 1000,
        "avg": round(Fraction(sum(powers), 12)) / 1000,
        "max": max(powers) / 1000,
    }
    assert w["temp_c"]["max"] == max(s.temp_c for s in snaps)
    # The energy counter integrates the power seen at each read over the next 5 s; the
    # window holds it as of 10:02:00, where the first read of the next minute took it.
    energy = sum(gpu.snapshot(t).power_mw * 5 for t in range(int(START), int(START + 120), 5))
    assert w["energy_mj"] == energy
    throttle = 0
    for s in snaps:
        throttle |= s.reasons
    assert w["throttle_reasons"] == throttle
    assert w["mem_total_bytes"] == 81559 * 1024 * 1024
    assert w["remapped_rows_pending"] is False and w["recovery_action"] == 0
    assert w["retired_pages"] is None  # Hopper remaps rows; it does not retire pages

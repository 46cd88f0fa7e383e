"""Utilization from the driver's sample buffer, the observed span and energy at the boundary,
held against loads whose busy time the fake knows to the microsecond."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import pynvml
import pytest

from telemetry.agent.agent import AgentConfig
from telemetry.agent.clock import FakeClock
from telemetry.agent.fake import FakeGpu, FakeNvml, PeriodicLoad, RandomLoad
from telemetry.agent.fake.loads import Load
from telemetry.agent.fake.models import model
from telemetry.agent.timefmt import parse_rfc3339
from telemetry.agent.utilization import Piece, SampleStream
from telemetry.agent.windows import WindowBuilder

from .conftest import START, Node
from .helpers import spooled_docs, windows_of

US = 1_000_000
S = int(START) * US  # START in microseconds


def loaded(clock: FakeClock, load: Load | None, key: str = "H100-SXM5-80GB") -> FakeNvml:
    return FakeNvml(clock, [FakeGpu(slot=0, model=model(key), bus=0x18, seed=9, load=load)])


def truth(load: Load, window: dict[str, Any], to: int | None = None) -> float:
    """The load's busy share of the window's observed span (or up to second `to`), in %."""
    start = round(parse_rfc3339(window["window_start"]) * US)
    lo: int = start + window["observed_from"] * US
    hi: int = start + (window["observed_to"] if to is None else to) * US
    return 100 * load.busy_us(lo, hi) / (hi - lo)


def sealed(node: Any) -> list[dict[str, Any]]:
    return windows_of(spooled_docs(str(node.tmp / "spool.db")))


def run_late(node: Any, until: float, late: float = 0.3) -> None:
    """Tick once a second, `late` seconds after each whole second (as a real agent wakes a
    little after its slot): each 5-s slot is read `late` s after it."""
    clock = node.clock
    second = int(clock.now())
    while second + late <= until:
        clock.set(max(clock.now(), second + late))
        node.agent.tick()
        second += 1


# Periodic loads with cycles of 1, 2, 5 and 10 s (busy/idle seconds), and random stretches.
PERIODIC = {
    "1s 0.5/0.5": PeriodicLoad(0.5, 0.5),
    "2s 0.6/1.4": PeriodicLoad(0.6, 1.4),
    "5s 2.5/2.5": PeriodicLoad(2.5, 2.5),
    "10s 5/5": PeriodicLoad(5.0, 5.0),
    "10s 3/7": PeriodicLoad(3.0, 7.0),
}
LOADS: dict[str, Load] = {
    **PERIODIC,
    "random 0.1-3s": RandomLoad(seed=4, start_s=START - 60),
    "random 0.5-8s": RandomLoad(seed=11, start_s=START - 60, low_s=0.5, high_s=8.0),
}


@pytest.mark.parametrize("name", LOADS)
def test_buffered_windows_are_within_one_point_of_the_true_busy_share(name, make_node, clock):
    load = LOADS[name]
    node = make_node(fake=loaded(clock, load))
    node.run_until(START + 8 * 60)
    windows = sealed(node)
    assert len(windows) == 8
    for w in windows:
        assert (w["observed_from"], w["observed_to"], w["util_method"]) == (0, 60, "buffer")
        assert abs(w["util_gpu"]["avg"] - truth(load, w)) <= 1, (name, w["window_start"])


# Read every 5 s on whole seconds, the instantaneous value locks onto one phase of these
# loads: each read sees the idle 200 ms before a cycle starts. (10 s 5/5 is not among them:
# reads 5 s apart see opposite halves, whose mean happens to be right.)
LOCKING = ("1s 0.5/0.5", "2s 0.6/1.4", "5s 2.5/2.5", "10s 3/7")


@pytest.mark.parametrize("name", LOCKING)
def test_instantaneous_reads_every_5_s_lock_onto_the_phase_of_periodic_loads(
    name, make_node, clock
):
    load = PERIODIC[name]
    config = AgentConfig(hostname="node-a", sample_timeout_s=0.5, util_buffer=False)
    node = make_node(fake=loaded(clock, load), config=config)
    node.run_until(START + 4 * 60)
    windows = sealed(node)
    assert len(windows) == 4
    for w in windows:
        assert w["util_method"] == "instant"
        assert w["util_gpu"]["avg"] == 0.0  # the true share is 30-50 %
        assert truth(load, w) - w["util_gpu"]["avg"] > 1


def test_a_gpu_without_a_buffer_reads_instantaneously_and_is_asked_once(make_node, clock):
    fake = loaded(clock, PeriodicLoad(0.5, 0.5), key="V100-SXM2-32GB")
    node = make_node(fake=fake)
    node.run_until(START + 180)
    windows = sealed(node)
    assert [w["util_method"] for w in windows] == ["instant"] * 3
    assert [w["util_gpu"]["avg"] for w in windows] == [0.0] * 3  # locked on the idle phase
    assert fake.calls["nvmlDeviceGetSamples"] == 1  # NotSupported: remembered
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 37


def test_a_straddling_sample_is_split_between_the_two_windows_by_time():
    stream = SampleStream()
    # 200 ms samples stamped at .1, .3, .5, ...: the one at 60.1 s covers 59.9-60.1 s.
    stamps = [S + 55_100_000 + i * 200_000 for i in range(26)]  # 55.1 .. 60.1
    first = stream.take(stream.plan([(t, 0) for t in stamps[:25]]), None)
    second = stream.take(stream.plan([(stamps[25], 100)]), None)
    assert second == [Piece(S + 59_900_000, S + 60_100_000, 100, True)]
    before, after = WindowBuilder("GPU-x", int(START), buffered=True), None
    before.look(START + 55, 5)
    after = WindowBuilder("GPU-x", int(START) + 60, buffered=True)
    after.look(START + 60, 5)
    for window in (before, after):
        window.add_pieces("util_gpu", first + second)
    assert before.pieces["util_gpu"] == [
        (S + 55 * US, S + 59_900_000, 0, True),  # 54.9-59.9 s, cut at its look at 55 s
        (S + 59_900_000, S + 60 * US, 100, True),  # 100 ms of the straddler
    ]
    assert after.pieces["util_gpu"] == [(S + 60 * US, S + 60_100_000, 100, True)]
    # 55-60 s: 4.9 s idle, 0.1 s busy -> 2 %; the new minute's 100 ms were all busy.
    assert before.wire()["util_gpu"] == {"min": 0, "avg": 2.0, "max": 100}
    assert after.wire()["util_gpu"] == {"min": 100, "avg": 100.0, "max": 100}


def test_a_gap_falls_back_to_the_instantaneous_read_for_its_span_only():
    stream = SampleStream()
    period = 200_000
    early = [(S + i * period, 50) for i in range(1, 11)]  # 0.2 .. 2.0 s, 50 %
    late = [(S + 5 * US + i * period, 90) for i in range(1, 6)]  # 5.2 .. 6.0 s, 90 %
    pieces = stream.take(stream.plan(early), None)
    plan = stream.plan(late)
    assert plan.has_gap  # 2.0 -> 5.2 s is more than 1.5 periods
    pieces += stream.take(plan, 10)  # the instantaneous read taken at that poll: 10 %
    gaps = [p for p in pieces if not p.buffered]
    assert gaps == [Piece(S + 2 * US, S + 5 * US, 10, False)]  # to one period before 5.2 s
    window = WindowBuilder("GPU-x", int(START), buffered=True)
    window.look(START, 5)
    window.look(START + 5, 1)
    window.add_pieces("util_gpu", pieces)
    doc = window.wire()
    # 0-2 s at 50 %, 2-5 s at 10 % (the gap), 5-6 s at 90 %.
    assert doc["util_gpu"] == {"min": 10, "avg": float(round(Fraction(100 + 30 + 90, 6), 3)),
                               "max": 90}  # fmt: skip
    assert doc["util_method"] == "mixed"


def test_an_overrun_between_polls_falls_back_for_the_lost_seconds_only(make_node, clock):
    """Polls 30 s apart, a buffer of 120 samples (24 s): each poll finds ~6 s lost. Those
    seconds take the instantaneous read of that poll (0 %: reads on whole seconds see the
    idle half of this load); the rest stays the buffer's."""
    load = PeriodicLoad(0.5, 0.5)
    fake = loaded(clock, load)
    gpu = fake.gpus[0]
    config = AgentConfig(hostname="node-a", sample_timeout_s=0.5, interval_s=30)
    node = make_node(fake=fake, config=config)
    node.run_until(START + 180)
    windows = sealed(node)
    assert [w["util_method"] for w in windows] == ["mixed"] * 3
    period, capacity = gpu.model.util_period_us, gpu.model.util_buffer_capacity
    for w in windows[1:]:
        ws = round(parse_rfc3339(w["window_start"]) * US)
        covered = Fraction(0)
        length = 0
        last = None
        for poll in (ws, ws + 30 * US, ws + 60 * US):
            stamps = list(gpu.sample_times(0, poll))
            assert len(stamps) == capacity
            if last is not None:
                gap_end = stamps[0] - period
                length += max(0, min(gap_end, ws + 60 * US) - max(last, ws))  # at 0 %
                prev = gap_end
            else:
                prev = None
            for t in stamps:
                start = t - period if prev is None else prev
                a, b = max(start, ws), min(t, ws + 60 * US)
                if b > a:
                    covered += gpu.sample_value(t)[0] * (b - a)
                    length += b - a
                prev = t
            last = stamps[-1]
        assert w["util_gpu"]["avg"] == float(round(covered / length, 3))
        assert 35 < w["util_gpu"]["avg"] < 45  # ~48 of 60 s at 50 %, the rest at 0 %
        assert abs(truth(load, w) - 50) <= 1


def test_a_driver_reload_clears_the_buffer_and_only_that_span_falls_back(make_node, clock):
    fake = loaded(clock, PeriodicLoad(0.5, 0.5))
    node = make_node(fake=fake)
    fake.at(START + 90, lambda f: f.driver_reload())
    node.run_until(START + 180)
    windows = sealed(node)
    assert [w["util_method"] for w in windows] == ["buffer", "mixed", "buffer"]
    assert windows[1]["samples_ok"] == 11  # the read at 10:01:30 met Uninitialized
    # 85.0-89.8 s, lost with the old buffer, read at 10:01:35 instantaneously: 0 %.
    assert windows[1]["util_gpu"]["min"] == 0
    assert 45 < windows[1]["util_gpu"]["avg"] < 47  # 55 s at 50 %, 5 s at 0 %


def test_observed_span_when_starting_and_stopping_mid_minute(make_node, clock):
    clock.set(START + 35)  # the agent starts 35 s into 10:00
    node = make_node(fake=loaded(clock, PeriodicLoad(2.5, 2.5)))
    node.run_until(START + 60 + 22.5)  # and stops 22.5 s into 10:01
    node.close()
    first, last = sealed(node)
    assert (first["observed_from"], first["observed_to"]) == (35, 60)
    assert (first["samples_ok"], first["samples_expected"]) == (5, 5)
    # Looks at 0, 5, ..., 20 s; it stopped at 22.5 s, rounded up to a whole second.
    assert (last["observed_from"], last["observed_to"]) == (0, 23)
    assert (last["samples_ok"], last["samples_expected"]) == (5, 5)
    assert last["util_method"] == "buffer"
    load = node.fake.gpus[0].load
    assert abs(first["util_gpu"]["avg"] - truth(load, first)) <= 1
    # The seconds after the last read (20-23 s) no sample covered when the agent stopped:
    # they are left out of the mean.
    assert abs(last["util_gpu"]["avg"] - truth(load, last, to=20)) <= 1
    assert abs(last["util_gpu"]["avg"] - truth(load, last)) > 1


def test_overslept_slots_are_not_looks_and_an_unlooked_minute_is_not_sent(make_node, clock):
    node = make_node(fake=loaded(clock, PeriodicLoad(2.5, 2.5)))
    node.run_until(START + 20)  # looks at 0 .. 20 s
    clock.set(START + 60 + 10)  # asleep until 10:01:10: 25 s .. 10:01:05 passed unsampled
    node.agent.tick()
    clock.set(START + 180 + 40)  # asleep again until 10:03:40: no look at all in 10:02
    node.agent.tick()
    node.run_until(START + 240)
    windows = sealed(node)
    spans = [(w["window_start"][14:16], w["observed_from"], w["observed_to"]) for w in windows]
    assert spans == [("00", 0, 25), ("01", 10, 15), ("03", 40, 60)]
    assert [w["samples_expected"] for w in windows] == [12, 12, 12]
    assert [w["samples_ok"] for w in windows] == [5, 1, 4]


def test_window_energy_is_the_counter_at_the_minute_boundary(make_node, clock):
    """Reads 0.3 s after each slot; the load is at full power from 55.3 to 60.3 s of every
    minute, so the counter is linear between the two reads around each boundary: the
    interpolated value must be the fake's counter at the boundary itself, and a window's
    difference from the previous one the energy the fake integrated over that minute."""
    load = PeriodicLoad(5.0, 5.0, offset_s=START + 5.3)
    fake = loaded(clock, load)
    gpu = fake.gpus[0]
    node = make_node(fake=fake)
    run_late(node, START + 5 * 60 + 1)
    windows = sealed(node)
    assert len(windows) == 5
    m = gpu.model
    born = S

    def counter(t_us: int) -> Fraction:  # mJ since the fake was created
        busy = load.busy_us(born, t_us)
        return Fraction(m.power_idle_mw * (t_us - born) + (m.power_max_mw - m.power_idle_mw) * busy,
                        US)  # fmt: skip

    for w in windows:
        end = round(parse_rfc3339(w["window_start"]) * US) + 60 * US
        # Within rounding: the counter reads whole millijoules, the interpolation rounds.
        assert abs(w["energy_mj"] - counter(end)) <= 2
    for prev, w in itertools.pairwise(windows):
        end = round(parse_rfc3339(w["window_start"]) * US) + 60 * US
        inside = counter(end) - counter(end - 60 * US)  # the energy of that very minute
        assert abs((w["energy_mj"] - prev["energy_mj"]) - inside) <= 4
    # Consecutive windows add up to the counter's rise between the first and last boundary.
    first_end, last_end = S + 60 * US, S + 5 * 60 * US
    rise = sum(b["energy_mj"] - a["energy_mj"] for a, b in itertools.pairwise(windows))
    assert abs(rise - (counter(last_end) - counter(first_end))) <= 4
    # The last read of each minute (at 55.3 s) is 4.7 s of full power short of the boundary.
    assert windows[1]["energy_mj"] - counter(S + 115_300_000) > 4 * m.power_max_mw


def test_a_counter_that_went_back_between_the_two_reads_is_not_interpolated():
    window = WindowBuilder("GPU-x", int(START))
    for slot in range(0, 60, 5):
        window.look(START + slot, 5)
    values: dict[str, Any] = {"energy_mj": 9_000_000}
    window.add(values, "up", None, energy_at=START + 55.3)
    window.finalize(1_200, START + 60.3)  # the driver reloaded in between
    assert window.wire()["energy_mj"] == 1_200
    again = WindowBuilder("GPU-x", int(START))
    for slot in range(0, 60, 5):
        again.look(START + slot, 5)
    again.add(values, "up", None, energy_at=START + 55.3)
    again.finalize(9_500_000, START + 60.3)  # 100 J/s: 470 J more at the boundary
    assert again.wire()["energy_mj"] == 9_470_000


def test_the_fake_buffer_answers_like_pynvml():
    clock = FakeClock(START)
    fake = loaded(clock, PeriodicLoad(0.5, 0.5))
    fake.add_gpu(FakeGpu(slot=1, model=model("V100-SXM2-32GB"), bus=0x2A, seed=9))
    fake.nvmlInit()
    h, volta = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    gpu = fake.gpus[0]
    kind, samples = fake.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert isinstance(samples, list) and isinstance(samples[0], pynvml.c_nvmlSample_t)
    assert len(samples) == gpu.model.util_buffer_capacity == 120  # a full ring
    stamps = [s.timeStamp for s in samples]
    assert all(b - a == 200_000 for a, b in itertools.pairwise(stamps))
    assert stamps[-1] <= S < stamps[-1] + 200_000
    assert stamps[-1] % 200_000 == gpu.util_phase_us % 200_000
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than the last one seen
        fake.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, stamps[-1])
    clock.advance(1)
    _, newer = fake.nvmlDeviceGetSamples(h, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, stamps[-1])
    assert [s.timeStamp for s in newer] == [stamps[-1] + i * 200_000 for i in range(1, 6)]
    for s in newer:  # a driver sample: the busy share of its period, rounded
        busy = gpu.load.busy_us(s.timeStamp - 200_000, s.timeStamp)  # type: ignore[union-attr]
        assert s.sampleValue.uiVal == round(100 * busy / 200_000) * 6 // 10
    # An instantaneous read: the last driver period only.
    util = fake.nvmlDeviceGetUtilizationRates(h)
    assert util.gpu == gpu.sample_value(newer[-1].timeStamp)[0]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetSamples(volta, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    clock.advance(0.5)
    fake.driver_reload()
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):  # the reload emptied the buffer...
        fake.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    clock.advance(0.5)
    _, fresh = fake.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert len(fresh) in (2, 3)  # ...and it refills from the reload on
    assert fresh[0].timeStamp > S + 1_500_000


def test_the_shipped_loads_scenario_reads_true_with_the_buffer_only(make_node, clock, tmp_path):
    node = make_node("h100x4-loads")
    node.run_until(START + 3 * 60)
    # The same node on its own clock, reading instantaneously.
    (tmp_path / "plain").mkdir()
    config = AgentConfig(hostname="n", sample_timeout_s=0.5, util_buffer=False)
    plain = Node(tmp_path / "plain", FakeClock(START), "h100x4-loads", config=config)
    try:
        plain.run_until(START + 3 * 60)
        instant_windows = sealed(plain)
    finally:
        plain.close()
    loads = [gpu.load for gpu in node.fake.gpus]
    assert [type(load).__name__ for load in loads] == ["PeriodicLoad"] * 3 + ["RandomLoad"]
    for gpu, load in zip(node.fake.gpus, loads, strict=True):
        buffered = [w for w in sealed(node) if w["gpu_uuid"] == gpu.uuid]
        instant = [w for w in instant_windows if w["gpu_uuid"] == gpu.uuid]
        assert len(buffered) == len(instant) == 3
        for w in buffered:
            assert w["util_method"] == "buffer"
            assert abs(w["util_gpu"]["avg"] - truth(load, w)) <= 1
        if isinstance(load, PeriodicLoad):  # locked onto the idle phase
            assert all(truth(load, w) - w["util_gpu"]["avg"] > 1 for w in instant)

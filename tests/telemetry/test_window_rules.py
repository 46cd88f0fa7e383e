"""The impossible-window rules (``telemetry.services.processing.rules``), one by one, and the
fast path held to them: ``window_fine`` may say True only where ``window_impossible`` finds
nothing. No database: the rules read one decoded window."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.agent.node import LOST, MISSING, RESET, STALL
from telemetry.agent.windows import RECOVERY_ACTIONS
from telemetry.schema import Window, WindowV2
from telemetry.services.processing.rules import window_fine, window_impossible
from telemetry.testing import window

T0 = dt.datetime(2026, 3, 2, 10, 0, tzinfo=dt.UTC)
GPU = "GPU-00000000-0000-0000-0000-000000000001"
V2 = {"observed_from": 0, "observed_to": 60, "util_method": "buffer"}


def decoded(**overrides: Any) -> Window:
    """A window as the worker sees it: decoded from the agent's JSON, schema 2."""
    document = window(GPU, T0, **{**V2, **overrides})
    return msgspec.json.decode(msgspec.json.encode(document), type=WindowV2)


def test_a_healthy_window_is_fine_and_possible():
    w = decoded()
    assert window_fine(w)
    assert window_impossible(w) is None


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"samples_ok": 0, "samples_expected": 0},
         "samples_expected is 0: a window is made of samples"),
        ({"samples_ok": 13}, "samples_ok 13 > samples_expected 12"),
        ({"util_gpu": {"min": 70.0, "avg": 50.0, "max": 60.0}},
         "util_gpu: min 70.0, avg 50.0, max 60.0 are out of order"),
        ({"util_mem": {"min": 10.0, "avg": 40.0, "max": 30.0}},
         "util_mem: min 10.0, avg 40.0, max 30.0 are out of order"),
        ({"mem_used_bytes": {"min": 3, "avg": 2.0, "max": 4}},
         "mem_used_bytes: min 3, avg 2.0, max 4 are out of order"),
        ({"temp_c": {"min": 50.0, "avg": 65.0, "max": 60.0}},
         "temp_c: min 50.0, avg 65.0, max 60.0 are out of order"),
        ({"clock_sm_mhz": {"min": 1800.0, "avg": 1700.0, "max": 1980.0}},
         "clock_sm_mhz: min 1800.0, avg 1700.0, max 1980.0 are out of order"),
        ({"clock_mem_mhz": {"min": 2619.0, "avg": 2700.0, "max": 2619.0}},
         "clock_mem_mhz: min 2619.0, avg 2700.0, max 2619.0 are out of order"),
        ({"power_w": {"avg": 450.0, "max": 400.0}}, "power_w: avg 450.0 > max 400.0"),
        ({"power_w": {"min": 360.0, "avg": 350.0, "max": 400.0}},
         "power_w: min 360.0 > avg 350.0"),
        ({"mem_total_bytes": 2 << 30}, f"mem_used_bytes.max {3 << 30} > mem_total_bytes {2 << 30}"),
        ({"observed_from": 30, "observed_to": 30},
         "observed_from 30 >= observed_to 30: the observed span is empty"),
        ({"util_method": None}, "util_method is null, but util_gpu or util_mem is given"),
        ({"util_gpu": None, "util_mem": None},
         "util_method is 'buffer', but neither util_gpu nor util_mem is given"),
        ({"state": "down", "state_reason": None},
         "state is 'down' but state_reason is null: degraded or down need a reason"),
        ({"state": "degraded", "state_reason": None},
         "state is 'degraded' but state_reason is null: degraded or down need a reason"),
        ({"state_reason": "xid:79"},
         "state_reason 'xid:79' on an up window: only degraded or down have a reason"),
        ({"state": "down", "state_reason": "XID 79"}, None),
        ({"state": "degraded", "state_reason": "xid:79\n"}, None),
        ({"state": "down", "state_reason": "Because"}, None),
        ({"state": "down", "state_reason": "xid:"}, None),
        ({"state": "down", "state_reason": "x" * 41}, None),
        ({"state": "down", "state_reason": "recovery_action:" + "A" * 21}, None),
    ],
)  # fmt: skip
def test_each_rule_refuses_its_contradiction_and_the_fast_path_does_not_pass_it(overrides, reason):
    w = decoded(**overrides)
    if reason is None:  # a reason of no known form: refused, naming it
        assert f"state_reason {overrides['state_reason']!r} is not a reason" in str(
            window_impossible(w)
        )
    else:
        assert window_impossible(w) == reason
    assert not window_fine(w)


# Every reason the agent gives (telemetry.agent: node, windows), and others of the same form
# that a newer agent might: none may cost a window.
AGENT_REASONS = [
    *(("down", r) for r in (LOST, RESET, STALL, MISSING, "nvml_unavailable", "no_samples")),
    *(("degraded", r) for r in ("row_remap_pending", "row_remap_failure", "retired_pages_pending")),
    *(("down", "xid:79"), ("degraded", "xid:13")),
    *(
        (state, f"recovery_action:{name}")
        for name, state in RECOVERY_ACTIONS.values()
        if state != "up"
    ),
    ("degraded", "recovery_action:8"),  # an action the agent has no name for
]


@pytest.mark.parametrize(
    ("state", "reason", "fast"),
    [
        ("up", None, True),
        *((state, reason, ":" not in reason) for state, reason in AGENT_REASONS),
        ("down", "because", False),  # a newer agent's word: possible, judged in full
        ("down", "xid:abc", False),
    ],
)
def test_every_reason_the_agent_gives_is_possible(state, reason, fast):
    w = decoded(state=state, state_reason=reason)
    assert window_impossible(w) is None
    assert window_fine(w) is fast


def test_rounding_within_a_millionth_is_not_a_contradiction():
    """An average a float rounding above the maximum is not impossible; the fast path sends it
    to the full check, which lets it through."""
    w = decoded(util_gpu={"min": 40.0, "avg": 60.0000001, "max": 60.0})
    assert window_impossible(w) is None
    assert not window_fine(w)


stats = st.fixed_dictionaries(
    {"min": st.floats(0, 100), "avg": st.floats(0, 100), "max": st.floats(0, 100)}
)


@settings(max_examples=400, deadline=None)
@given(
    util=st.none() | stats,
    temp=st.none() | stats,
    power=st.none() | st.fixed_dictionaries(
        {"avg": st.floats(0, 1000), "max": st.floats(0, 1000)},
        optional={"min": st.floats(0, 1000)},
    ),
    samples=st.tuples(st.integers(0, 20), st.integers(0, 20)),
    span=st.tuples(st.integers(0, 59), st.integers(1, 60)),
    method=st.sampled_from([None, "buffer"]),
    state=st.sampled_from(["up", "degraded", "down"]),
    reason=st.sampled_from([None, "gpu_is_lost", "xid:79", "recovery_action:X", "because"]),
)  # fmt: skip
def test_the_fast_path_never_passes_a_window_a_rule_refuses(
    util, temp, power, samples, span, method, state, reason
):
    w = decoded(
        util_gpu=util, util_mem=None, temp_c=temp, power_w=power, samples_ok=samples[0],
        samples_expected=samples[1], observed_from=span[0], observed_to=span[1],
        util_method=method, state=state, state_reason=reason,
    )  # fmt: skip
    if window_fine(w):
        assert window_impossible(w) is None

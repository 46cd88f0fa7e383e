"""The impossible-window rules: what no real minute of a GPU can say.

Checked by the worker for every window (``telemetry.services.processing.validation``); the
single-field bounds were checked on receipt (``telemetry.schema``). A window that breaks one
is rejected alone, as ``impossible_value`` with the rule's sentence, and the rest of its batch
is kept (docs/telemetry.md). ``window_fine`` is the fast path: True only when no rule can
fail, in a few comparisons; ``window_impossible`` names the first rule that does.
tests/telemetry/test_window_rules.py holds the two to each other and to every rule.
"""

from __future__ import annotations

import re
from typing import Any

from telemetry.schema import Window

_EPS = 1e-6
# Which rules these are: part of the layout of the rows the endpoint prepares
# (``prepared.LAYOUT``), which say whether no rule can fail. Raise it with any change to the
# rules, and rows prepared under the old ones are made again from their bodies.
RULES_VERSION = 2
# Why a GPU is degraded or down (docs/agent.md 5.3): the agent's reasons, the fast path's.
# Any reason of the same form is possible too (a word, or a word and a value: a recovery
# action NVML asked for, an XID), so that a newer agent's reason loses no window.
STATE_REASONS = frozenset(
    {
        "gpu_is_lost",
        "reset_required",
        "nvml_stall",
        "nvml_unavailable",
        "gpu_missing",
        "no_samples",
        "row_remap_pending",
        "row_remap_failure",
        "retired_pages_pending",
    }
)
_REASON_FORM = re.compile(r"[a-z][a-z_]{0,39}(?::[A-Za-z0-9_]{1,20})?\Z")


def _reason_problem(state: str, reason: str | None) -> str | None:
    """A state and its reason that contradict each other, or a reason of no known form."""
    if state == "up":
        if reason is None:
            return None
        return f"state_reason {reason!r} on an up window: only degraded or down have a reason"
    if reason is None:
        return f"state is {state!r} but state_reason is null: degraded or down need a reason"
    if _REASON_FORM.match(reason):
        return None
    return (
        f"state_reason {reason[:80]!r} is not a reason: a word of a-z and _, optionally "
        "followed by : and a value of A-Z, a-z, 0-9 and _ (gpu_is_lost, xid:79)"
    )


def window_impossible(w: Window) -> str | None:
    """A contradiction, or None: cross-field ones, a window of no samples, and a reason of
    no known form. The other single-field bounds were checked on receipt.

    Written out field by field: it runs for every window, and a loop over getattr costs
    several times as much."""
    if w.samples_expected == 0:
        return "samples_expected is 0: a window is made of samples"
    reason = _reason_problem(w.state, w.state_reason)
    if reason:
        return reason
    if w.samples_ok > w.samples_expected:
        return f"samples_ok {w.samples_ok} > samples_expected {w.samples_expected}"
    s: Any
    for name, s in (
        ("util_gpu", w.util_gpu),
        ("util_mem", w.util_mem),
        ("mem_used_bytes", w.mem_used_bytes),
        ("temp_c", w.temp_c),
        ("clock_sm_mhz", w.clock_sm_mhz),
        ("clock_mem_mhz", w.clock_mem_mhz),
    ):
        if s is not None and (s.min > s.avg + _EPS or s.avg > s.max + _EPS):
            return f"{name}: min {s.min}, avg {s.avg}, max {s.max} are out of order"
    p = w.power_w
    if p is not None and p.avg > p.max + _EPS:
        return f"power_w: avg {p.avg} > max {p.max}"
    if p is not None and p.min is not None and p.min > p.avg + _EPS:
        return f"power_w: min {p.min} > avg {p.avg}"
    mem, total = w.mem_used_bytes, w.mem_total_bytes
    if mem is not None and total is not None and mem.max > total:
        return f"mem_used_bytes.max {mem.max} > mem_total_bytes {total}"
    # Only a schema-2 window can contradict these (a v1 one reads as 0–60, its method as
    # what it measured).
    if w.observed_from >= w.observed_to:
        return (
            f"observed_from {w.observed_from} >= observed_to {w.observed_to}: "
            "the observed span is empty"
        )
    measured = w.util_gpu is not None or w.util_mem is not None
    if w.util_method is None and measured:
        return "util_method is null, but util_gpu or util_mem is given"
    if w.util_method is not None and not measured:
        return f"util_method is {w.util_method!r}, but neither util_gpu nor util_mem is given"
    return None


def window_fine(w: Window) -> bool:
    """True when no cross-field check can fail: the common case, in a few comparisons."""
    u, m, mem, t, sm, p = w.util_gpu, w.util_mem, w.mem_used_bytes, w.temp_c, w.clock_sm_mhz, w.power_w  # fmt: skip  # noqa: E501
    cm = w.clock_mem_mhz
    return (
        w.samples_expected > 0
        and w.samples_ok <= w.samples_expected
        and ((w.state_reason is None) if w.state == "up" else (w.state_reason in STATE_REASONS))
        and (u is None or u.min <= u.avg <= u.max)
        and (m is None or m.min <= m.avg <= m.max)
        and (mem is None or (mem.min <= mem.avg <= mem.max
                             and (w.mem_total_bytes is None or mem.max <= w.mem_total_bytes)))
        and (t is None or t.min <= t.avg <= t.max)
        and (sm is None or sm.min <= sm.avg <= sm.max)
        and (cm is None or cm.min <= cm.avg <= cm.max)
        and (p is None or (p.avg <= p.max and (p.min is None or p.min <= p.avg)))
        and w.observed_from < w.observed_to
        and (w.util_method is None) is (u is None and m is None)
    )  # fmt: skip

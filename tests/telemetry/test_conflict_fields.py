"""Which fields of a window take part in conflict detection (docs/telemetry.md, Processing):
every stored one; the few the contract has and the server does not store are named there as
not stored and not compared, and a copy differing only in those is a replay."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from telemetry.models import RejectedRecord, TelemetryWindow
from telemetry.services.derived import derived_drain
from telemetry.services.processing import _WINDOW_CONTENT, batches_process
from telemetry.testing import batch_document, window

pytestmark = pytest.mark.usefixtures("now")
T0 = dt.datetime(2026, 11, 21, 9, 0, tzinfo=dt.UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"

# The contract's window fields the server does not store: changed, each must leave a replay.
NOT_STORED: dict[str, dict[str, Any]] = {
    "util_mem.min": {"util_mem": {"min": 11.0, "avg": 20.0, "max": 30.0}},
    "mem_used_bytes.min": {"mem_used_bytes": {"min": 1 << 29, "avg": 2 << 30, "max": 3 << 30}},
    "mem_used_bytes.avg": {"mem_used_bytes": {"min": 1 << 30, "avg": 5 << 29, "max": 3 << 30}},
    "power_w.min": {"power_w": {"min": 100.0, "avg": 350.0, "max": 400.0}},
    "temp_c.min": {"temp_c": {"min": 51.0, "avg": 55.0, "max": 60.0}},
    "clock_sm_mhz.min": {"clock_sm_mhz": {"min": 1400.0, "avg": 1700.0, "max": 1980.0}},
    "clock_sm_mhz.max": {"clock_sm_mhz": {"min": 1500.0, "avg": 1700.0, "max": 1990.0}},
    "clock_mem_mhz.min": {"clock_mem_mhz": {"min": 2000.0, "avg": 2619.0, "max": 2619.0}},
    "clock_mem_mhz.max": {"clock_mem_mhz": {"min": 2619.0, "avg": 2619.0, "max": 3000.0}},
    "remapped_rows_failure": {"remapped_rows_failure": True},
    "retired_pages_pending": {"retired_pages_pending": True},
}
# Stored fields, each changed alone: each must be a conflict.
STORED: dict[str, dict[str, Any]] = {
    "samples_ok": {"samples_ok": 11},
    "samples_expected": {"samples_expected": 11, "samples_ok": 11},
    "state": {"state": "degraded", "state_reason": "xid:79"},
    "util_gpu.min": {"util_gpu": {"min": 41.0, "avg": 50.0, "max": 60.0}},
    "util_mem.avg": {"util_mem": {"min": 10.0, "avg": 21.0, "max": 30.0}},
    "mem_used_bytes.max": {"mem_used_bytes": {"min": 1 << 30, "avg": 2 << 30, "max": 4 << 30}},
    "mem_total_bytes": {"mem_total_bytes": 81 << 30},
    "power_w.max": {"power_w": {"avg": 350.0, "max": 401.0}},
    "energy_mj": {"energy_mj": 1_000_000_001},
    "temp_c.max": {"temp_c": {"min": 50.0, "avg": 55.0, "max": 61.0}},
    "clock_mem_mhz.avg": {"clock_mem_mhz": {"min": 2000.0, "avg": 2500.0, "max": 2619.0}},
    "throttle_reasons": {"throttle_reasons": 4},
    "ecc_uncorrected": {"ecc_uncorrected": 1},
    "remapped_rows_pending": {"remapped_rows_pending": True},
    "pcie_replays": {"pcie_replays": 7},
    "recovery_action": {"recovery_action": 1},
}


def send(post, node, windows):
    response = post(node, batch_document(node=node, windows=windows))
    assert response.status_code == 202, response.json()


def process():
    result = batches_process(worker="test-worker")
    derived_drain(limit=1000)
    return result


def test_the_documented_lists_are_the_columns_compared():
    """docs/telemetry.md names the fields compared and those neither stored nor compared; the
    columns compared are what the worker's conflict query compares."""
    text = " ".join(DOCS.read_text().split())
    section = text[text.index("Compared are") : text.index("Events are stored once")]
    for name in NOT_STORED:
        head, _, tail = name.partition(".")
        assert re.search(rf"`{re.escape(head)}(\.{tail}|`)", section) or f"`{name}`" in section, (
            name
        )
    assert set(_WINDOW_CONTENT) == {
        "node_id", "samples_ok", "samples_expected", "state", "state_reason", "util_gpu_min",
        "util_gpu_avg", "util_gpu_max", "util_mem_avg", "util_mem_max", "mem_used_max_bytes",
        "mem_total_bytes", "power_avg_w", "power_max_w", "energy_mj", "temp_avg_c", "temp_max_c",
        "clock_sm_avg_mhz", "clock_mem_avg_mhz", "throttle_reasons", "ecc_corrected",
        "ecc_uncorrected", "remapped_rows_correctable", "remapped_rows_uncorrectable",
        "remapped_rows_pending", "retired_pages", "pcie_replays", "recovery_action",
        "observed_from", "observed_to", "util_method",
    }  # fmt: skip


def test_a_copy_differing_only_in_fields_not_stored_is_a_replay(node, post):
    g0 = node.gpus[0].nvml_uuid
    send(post, node, [window(g0, T0)])
    process()
    for overrides in NOT_STORED.values():
        send(post, node, [window(g0, T0, **overrides)])
    result = process()
    assert (result.windows, result.rejected) == (len(NOT_STORED), 0)
    assert not RejectedRecord.objects.exists()
    assert TelemetryWindow.objects.count() == 1


def test_a_copy_differing_in_any_stored_field_is_a_conflict(node, post):
    g0 = node.gpus[0].nvml_uuid
    send(post, node, [window(g0, T0)])
    process()
    for overrides in STORED.values():
        send(post, node, [window(g0, T0, **overrides)])
    result = process()
    assert (result.windows, result.rejected) == (0, len(STORED))
    assert RejectedRecord.objects.filter(reason="conflict").count() == len(STORED)

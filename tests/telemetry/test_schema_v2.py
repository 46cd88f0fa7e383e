"""Body schema 2 beside schema 1: the observed part of each minute and the utilization
method, decoded, checked, stored by the worker, and compared when a minute comes twice."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from telemetry.models import IngestBatch, RejectedRecord, TelemetryWindow
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, window
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
START = NOW.replace(second=0) - dt.timedelta(minutes=10)
MINUTE = dt.timedelta(minutes=1)


def at(minutes: int) -> dt.datetime:
    return START + minutes * MINUTE


def v2_window(
    gpu_uuid: str, start: dt.datetime, span: tuple[int, int] = (0, 60), method: Any = "buffer",
    **overrides: Any,
) -> dict[str, Any]:  # fmt: skip
    return window(
        gpu_uuid, start, observed_from=span[0], observed_to=span[1], util_method=method,
        **overrides,
    )  # fmt: skip


def v2_document(node, windows: list[dict[str, Any]]) -> dict[str, Any]:
    return {**batch_document(node=node, windows=windows), "schema": 2}


def stored_spans(node) -> list[tuple[int, dt.datetime, int, int, str | None]]:
    """(GPU's slot, minute, observed_from, observed_to, util_method) of every stored window."""
    slot = {g.id: i for i, g in enumerate(node.gpus)}
    rows = TelemetryWindow.objects.values_list(
        "gpu_id", "window_start", "observed_from", "observed_to", "util_method"
    )
    return sorted((slot[g], start, f, t, m) for g, start, f, t, m in rows)


def test_a_schema_2_batch_is_accepted_and_its_spans_and_methods_stored(node, post):
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    document = v2_document(node, [
        v2_window(g0, at(0), (17, 60), "buffer"),
        v2_window(g0, at(1), (0, 60), "mixed"),
        v2_window(g0, at(2), (0, 43), "instant"),
        v2_window(g1, at(0), (5, 59), None, state="down", util_gpu=None, util_mem=None),
    ])  # fmt: skip
    response = post(node, document)
    assert response.status_code == 202, response.json()
    assert response.json()["windows"] == 4
    assert IngestBatch.objects.get().schema == 2
    result = batches_process(worker="w")
    assert (result.windows, result.rejected) == (4, 0)
    assert stored_spans(node) == [
        (0, at(0), 17, 60, "buffer"),
        (0, at(1), 0, 60, "mixed"),
        (0, at(2), 0, 43, "instant"),
        (1, at(0), 5, 59, None),
    ]


def test_a_schema_1_batch_is_stored_as_the_whole_minute_read_instantaneously(node, post):
    """v1 does not define the new keys: any in a v1 body are ignored, not checked."""
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    document = batch_document(node=node, windows=[
        window(g0, at(0)),
        window(g0, at(1), util_gpu=None),  # util_mem alone is still a measured utilization
        window(g1, at(0), state="down", util_gpu=None, util_mem=None),
        window(g1, at(1), observed_from=99, observed_to=-4, util_method="telepathy"),
    ])  # fmt: skip
    response = post(node, document)
    assert response.status_code == 202, response.json()
    assert IngestBatch.objects.get().schema == 1
    assert batches_process(worker="w").windows == 4
    assert stored_spans(node) == [
        (0, at(0), 0, 60, "instant"),
        (0, at(1), 0, 60, "instant"),
        (1, at(0), 0, 60, None),
        (1, at(1), 0, 60, "instant"),
    ]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"observed_to": 61}, "windows[0].observed_to", "<= 60"),
        ({"observed_to": 0}, "windows[0].observed_to", ">= 1"),
        ({"observed_from": -1}, "windows[0].observed_from", ">= 0"),
        ({"observed_from": 60}, "windows[0].observed_from", "<= 59"),
        ({"observed_from": 1.5}, "windows[0].observed_from", "Expected `int`"),
        ({"util_method": "guess"}, "windows[0].util_method", "Invalid enum value 'guess'"),
        ({"observed_from": None}, "windows[0].observed_from", "Expected `int`"),
        ("observed_from", "windows[0].observed_from", "observed_from is required"),
        ("observed_to", "windows[0].observed_to", "observed_to is required"),
        ("util_method", "windows[0].util_method", "util_method is required"),
    ],
)
def test_bad_or_missing_schema_2_keys_are_422_naming_the_field(node, post, change, field, says):
    w = v2_window(node.gpus[0].nvml_uuid, at(0))
    if isinstance(change, str):
        del w[change]
    else:
        w.update(change)
    response = post(node, v2_document(node, [w]))
    assert response.status_code == 422
    answer = response.json()
    assert (answer["error"], answer["field"]) == ("invalid_batch", field)
    assert says in answer["detail"]
    assert answer["window"] == {
        "index": 0, "gpu_uuid": node.gpus[0].nvml_uuid, "window_start": w["window_start"]
    }  # fmt: skip
    assert not IngestBatch.objects.exists()


@pytest.mark.parametrize(
    ("schema", "says"),
    [(3, "schema must be 1 or 2; 3 is not one."), (0, "schema must be 1 or 2; 0 is not one."),
     ("2", "Expected `int`"), (None, "Expected `int`")],
)  # fmt: skip
def test_a_schema_other_than_1_or_2_is_422(node, post, schema, says):
    document = v2_document(node, [v2_window(node.gpus[0].nvml_uuid, at(0))])
    document["schema"] = schema
    response = post(node, document)
    assert response.status_code == 422
    answer = response.json()
    assert (answer["error"], answer["field"], answer["detail"][: len(says)]) == (
        "invalid_batch", "schema", says
    )  # fmt: skip
    assert not IngestBatch.objects.exists()


def test_a_body_without_a_schema_is_422(node, post):
    document = v2_document(node, [v2_window(node.gpus[0].nvml_uuid, at(0))])
    del document["schema"]
    answer = post(node, document).json()
    assert (answer["field"], answer["detail"]) == ("schema", "schema is required.")


def test_impossible_spans_and_methods_are_rejected_alone_with_their_reason(node, post):
    g0 = node.gpus[0].nvml_uuid
    document = v2_document(node, [
        v2_window(g0, at(0), (30, 30)),
        v2_window(g0, at(1), (45, 12)),
        v2_window(g0, at(2), (0, 60), None),
        v2_window(g0, at(3), (0, 60), "buffer", util_gpu=None, util_mem=None),
        v2_window(g0, at(4), (0, 60), None, util_gpu=None),  # util_mem alone is measured
        v2_window(g0, at(5), (0, 60), "instant", util_gpu=None),
        v2_window(g0, at(6), (59, 60), None, state="down", util_gpu=None, util_mem=None),
    ])  # fmt: skip
    assert post(node, document).status_code == 202
    result = batches_process(worker="w")
    assert (result.windows, result.rejected) == (2, 5)
    rejected = RejectedRecord.objects.order_by("index").values_list("index", "reason", "detail")
    assert list(rejected) == [
        (0, "impossible_value", "observed_from 30 >= observed_to 30: the observed span is empty"),
        (1, "impossible_value", "observed_from 45 >= observed_to 12: the observed span is empty"),
        (2, "impossible_value", "util_method is null, but util_gpu or util_mem is given"),
        (3, "impossible_value",
         "util_method is 'buffer', but neither util_gpu nor util_mem is given"),
        (4, "impossible_value", "util_method is null, but util_gpu or util_mem is given"),
    ]  # fmt: skip
    assert RejectedRecord.objects.get(index=1).payload["observed_to"] == 12
    assert stored_spans(node) == [(0, at(5), 0, 60, "instant"), (0, at(6), 59, 60, None)]
    batch = IngestBatch.objects.get()
    assert (batch.accepted_windows, batch.rejected_count) == (2, 5)


@pytest.mark.parametrize("optimistic", [True, False])
def test_a_replayed_v2_minute_is_a_replay_and_one_differing_in_its_span_a_conflict(
    node, post, optimistic
):
    g0 = node.gpus[0].nvml_uuid
    assert post(node, v2_document(node, [v2_window(g0, at(0), (12, 48))])).status_code == 202
    assert batches_process(worker="w", optimistic_copy=optimistic).windows == 1
    first = IngestBatch.objects.get()
    # The same window again, in a new batch (the agent's spool replaying): accepted, no row.
    assert post(node, v2_document(node, [v2_window(g0, at(0), (12, 48))])).status_code == 202
    result = batches_process(worker="w", optimistic_copy=optimistic)
    assert (result.windows, result.rejected) == (1, 0)
    # The same minute, the same values, but observed to another second: a conflict.
    changes: list[dict[str, Any]] = [{"span": (12, 47)}, {"span": (11, 48)}, {"method": "mixed"}]
    for change in changes:
        document = v2_document(node, [v2_window(g0, at(0), **{"span": (12, 48), **change})])
        assert post(node, document).status_code == 202
        result = batches_process(worker="w", optimistic_copy=optimistic)
        assert (result.windows, result.rejected) == (0, 1)
    conflicts = RejectedRecord.objects.filter(reason="conflict").order_by("recorded_at", "id")
    said = [(c.payload["observed_from"], c.payload["observed_to"], c.payload["util_method"])
            for c in conflicts]  # fmt: skip
    assert said == [(12, 47, "buffer"), (11, 48, "buffer"), (12, 48, "mixed")]
    assert all(f"from batch {first.pk}" in c.detail for c in conflicts)
    assert stored_spans(node) == [(0, at(0), 12, 48, "buffer")]


def test_a_v1_copy_of_a_minute_stored_from_v2_is_a_conflict(node, post):
    """An agent upgraded mid-spool resends a minute in the other schema: what it says about
    the minute differs (its span, its method), so the first copy is kept and the other
    recorded."""
    g0 = node.gpus[0].nvml_uuid
    first = v2_document(node, [v2_window(g0, at(0), (0, 60), "buffer")])
    assert post(node, first).status_code == 202
    batches_process(worker="w")
    assert post(node, batch_document(node=node, windows=[window(g0, at(0))])).status_code == 202
    result = batches_process(worker="w")
    assert (result.windows, result.rejected) == (0, 1)
    assert stored_spans(node) == [(0, at(0), 0, 60, "buffer")]

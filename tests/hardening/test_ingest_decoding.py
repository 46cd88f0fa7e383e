"""Bodies that once crashed the batch decoder (issue 23): each is a 4xx naming the problem,
a status the agent dead-letters (400, 413, 422), and nothing is stored."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pytest

from telemetry.models import IngestBatch
from telemetry.schema import MAX_DETAIL_TEXT, MAX_EVENTS, MAX_WINDOWS
from telemetry.testing import batch_document, event, window
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
START = NOW.replace(second=0) - dt.timedelta(minutes=2)


def doc_for(node, *, events=None):
    return batch_document(
        node=node, windows=[window(node.gpus[0].nvml_uuid, START)], events=events or []
    )


def refused(response, *, status=422, field=None, says=""):
    assert response.status_code == status, response.content
    answer = response.json()
    assert answer["error"] == ("invalid_batch" if status == 422 else answer["error"])
    if field is not None:
        assert answer["field"] == field
    assert says in answer["detail"]
    assert not IngestBatch.objects.exists()
    return answer


def text_body(document, old, new):
    """The document's JSON with one piece of text replaced by raw bytes, gzipped."""
    raw = json.dumps(document).encode()
    assert raw.count(old) == 1
    return gzip.compress(raw.replace(old, new))


def test_invalid_utf8_inside_a_string_is_422_naming_field_and_window(node, post):
    document = doc_for(node)
    document["windows"][0]["state_reason"] = "PLACEHOLDER"
    body = text_body(document, b"PLACEHOLDER", b"thermal \xff\xfe")
    answer = refused(
        post(node, document, body=body), field="windows[0].state_reason", says="not valid UTF-8"
    )
    assert "byte" in answer["detail"]
    assert answer["window"]["index"] == 0


def test_an_answer_naming_a_byte_that_is_not_utf8_is_valid_unicode(node, post):
    """The field's path holds the bad byte: written ``\\xff``, never as a lone surrogate a
    strict JSON reader refuses in the answer itself."""
    document = doc_for(node)
    body = text_body(document, b'"state_reason"', b'"state\xff_reason"')
    answer = refused(post(node, document, body=body), says="not valid UTF-8")
    assert answer["field"] == "windows[0].state\\xff_reason"
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # no lone surrogate anywhere


def test_an_answer_naming_a_window_from_bytes_that_are_not_utf8_is_valid_unicode(node, post):
    """The window the field is in is named from a lenient reading, whatever its values are:
    here its GPU is a list holding the bad byte."""
    document = doc_for(node)
    gpu = document["windows"][0]["gpu_uuid"].encode()
    body = text_body(document, b'"' + gpu + b'"', b'["\xff"]')
    answer = refused(post(node, document, body=body), says="not valid UTF-8")
    assert answer["field"] == "windows[0].gpu_uuid[0]"
    assert answer["window"]["gpu_uuid"] == ["\\xff"]
    json.dumps(answer, ensure_ascii=False).encode("utf-8")


def test_invalid_utf8_in_a_field_the_server_ignores_is_still_422(node, post):
    document = doc_for(node)
    document["gpus"] = [{"name": "PLACEHOLDER"}]
    body = text_body(document, b"PLACEHOLDER", b"\xc3\x28")
    refused(post(node, document, body=body), field="gpus[0].name", says="not valid UTF-8")


def test_invalid_utf8_outside_any_string_is_422(node, post):
    document = doc_for(node)
    body = gzip.compress(json.dumps(document).encode() + b"\xff")
    refused(post(node, document, body=body), says="not valid UTF-8")


@pytest.mark.parametrize("depth", [33, 1_200, 5_000, 100_000])
def test_a_detail_nested_deeper_than_32_is_422_before_any_decoder_recurses(node, post, depth):
    document = doc_for(node, events=[event("xid", START, gpu_uuid=node.gpus[0].nvml_uuid)])
    document["events"][0]["detail"] = {"deep": "PLACEHOLDER"}
    # The body, events, the event and the detail are 4 levels: `depth` levels in all.
    nested = b"[" * (depth - 4) + b"]" * (depth - 4)
    body = text_body(document, b'"PLACEHOLDER"', nested)
    refused(post(node, document, body=body), says="more than 32 deep")


def test_32_levels_are_accepted(node, post):
    document = doc_for(node, events=[event("xid", START, gpu_uuid=node.gpus[0].nvml_uuid)])
    document["events"][0]["detail"] = {"deep": "PLACEHOLDER"}
    body = text_body(document, b'"PLACEHOLDER"', b"[" * 28 + b"]" * 28)
    assert post(node, document, body=body).status_code == 202


def test_brackets_inside_strings_are_not_nesting(node, post):
    document = doc_for(node, events=[event("xid", START, gpu_uuid=node.gpus[0].nvml_uuid)])
    document["events"][0]["detail"] = {"message": '[{"\\' * 200}
    assert post(node, document).status_code == 202


def test_a_nul_deep_in_a_detail_is_422_naming_its_path(node, post):
    """The NUL walk is iterative: the path is found at any depth the limit allows."""
    inner: object = {"note": "a\x00b"}
    for _ in range(20):
        inner = [inner]
    document = doc_for(node, events=[event("xid", START, detail={"deep": inner})])
    answer = refused(post(node, document), says="NUL")
    assert answer["field"] == "events[0].detail.deep" + "[0]" * 20 + ".note"


def test_half_a_surrogate_pair_is_422(node, post):
    document = doc_for(node)
    document["windows"][0]["state_reason"] = "PLACEHOLDER"
    body = text_body(document, b"PLACEHOLDER", b"\\ud800")  # valid JSON, no character
    refused(post(node, document, body=body), field="windows[0].state_reason", says="surrogate")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_422_naming_the_field(node, post, constant):
    document = doc_for(node)
    document["windows"][0]["power_w"]["max"] = "PLACEHOLDER"
    body = text_body(document, b'"PLACEHOLDER"', constant.encode())
    answer = refused(post(node, document, body=body), field="windows[0].power_w.max")
    assert answer["detail"] == f"{constant} is not valid JSON: numbers must be finite."
    assert answer["window"]["gpu_uuid"] == node.gpus[0].nvml_uuid


def test_a_non_finite_number_in_a_detail_is_named_too(node, post):
    document = doc_for(node, events=[event("xid", START, detail={"x": 1, "y": "PLACEHOLDER"})])
    body = text_body(document, b'"PLACEHOLDER"', b"1e999")
    refused(post(node, document, body=body), field="events[0].detail.y", says="out of range")


@pytest.mark.parametrize(
    ("value", "status"), [(2**63 - 1, 202), (2**63, 422), (-(2**63), 422), (10**4000, 422)]
)
def test_integers_in_a_detail_fit_a_signed_64_bit_integer(node, post, value, status):
    document = doc_for(node, events=[event("xid", START, detail={"count": value})])
    response = post(node, document)
    assert response.status_code == status
    if status == 422:
        assert response.json()["field"] == "events[0].detail.count"


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (b'"state": "up"', b'"state": "up", "state": "down"', "windows[0].state"),
        (b'"samples_ok": 12', b'"samples_ok": 12, "samples_ok": 12', "windows[0].samples_ok"),
        (b'"agent": {', b'"agent": {"version": "a", ', "agent.version"),
    ],
)
def test_a_key_twice_in_one_object_is_422(node, post, old, new, field):
    document = doc_for(node)
    body = text_body(document, old, new)
    refused(post(node, document, body=body), field=field, says="appears twice")


def test_more_windows_than_the_cap_is_422(node, post):
    windows = [
        window(node.gpus[i % 2].nvml_uuid, START - dt.timedelta(minutes=i // 2))
        for i in range(MAX_WINDOWS + 1)
    ]
    document = batch_document(node=node, windows=windows)
    refused(post(node, document), field="windows", says="at most 10,000 windows")


def test_more_events_than_the_cap_is_422(node, post):
    events = [event("nvml_stall", START) for _ in range(MAX_EVENTS + 1)]
    refused(post(node, doc_for(node, events=events)), field="events", says="at most 20,000")


def test_detail_text_over_the_cap_is_422(node, post):
    fits = doc_for(node, events=[event("xid", START, detail={"message": "m" * MAX_DETAIL_TEXT})])
    assert post(node, fits).status_code == 202
    IngestBatch.objects.all().delete()
    over = doc_for(node, events=[event("xid", START, detail={"k" * 1001: 1})])
    refused(post(node, over), field="events[0].detail." + "k" * 1001, says="at most 1000")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not gzip at all", "not valid gzip"),
        (gzip.compress(b'{"schema": 2}')[:-6], "truncated gzip"),
    ],
)
def test_a_body_that_is_not_a_whole_gzip_stream_is_422(node, post, body, says):
    refused(post(node, doc_for(node), body=body), says=says)


@pytest.mark.parametrize(
    ("after", "says"),
    [
        (b"garbage", "7 byte(s) follow its end"),
        (b"\0" * 8, "8 byte(s) follow its end"),
        (gzip.compress(b""), "follow its end"),  # a second member
    ],
)
def test_bytes_after_the_gzip_stream_are_422_and_nothing_is_stored(node, post, after, says):
    document = doc_for(node)
    whole = gzip.compress(json.dumps(document).encode())
    refused(post(node, document, body=whole + after), says=says)
    assert not IngestBatch.objects.exists()
    assert post(node, document, body=whole).status_code == 202


@pytest.mark.parametrize(
    ("number", "says"),
    [
        (b"1e999", "out of range"),
        (b"-1e999", "out of range"),
        (b"99999999999999999999999", "signed 64-bit"),
    ],
)
def test_a_number_out_of_range_in_a_detail_is_422_naming_it(node, post, number, says):
    """Beside a text that begins with a digit, which is no number (was a 500)."""
    document = doc_for(
        node, events=[event("xid", START, xid=79, detail={"pci": "00000000:18:00.0", "n": 1})]
    )
    body = text_body(document, b'"n": 1', b'"n": ' + number)
    refused(post(node, document, body=body), field="events[0].detail.n", says=says)


def test_a_body_that_is_not_an_object_is_422(node, post):
    for raw in (b"[]", b"1", b'"x"', b"null", b""):
        refused(post(node, doc_for(node), body=gzip.compress(raw)))


def test_a_wrong_type_is_422_naming_the_field(node, post):
    document = doc_for(node)
    document["windows"][0]["samples_ok"] = "12"
    refused(post(node, document), field="windows[0].samples_ok", says="Expected `int`")


def test_the_idempotency_key_is_unused_after_a_refusal(node, post):
    """A refused batch leaves no trace: the same key with a good body is accepted."""
    document = doc_for(node)
    body = text_body(document, b'"state": "up"', b'"state": "up", "state": "up"')
    refused(post(node, document, body=body))
    assert post(node, document).status_code == 202
    assert str(IngestBatch.objects.get().batch_id) == document["batch_id"]


def test_a_refused_batch_is_logged_with_its_batch_and_node(node, post, caplog):
    """The agent dead-letters it: the operator sees which batch of which node, and why."""
    document = doc_for(node)
    document["windows"][0]["samples_ok"] = -1
    refused(post(node, document), field="windows[0].samples_ok")
    (record,) = [r for r in caplog.records if r.name == "telemetry.views"]
    assert record.levelname == "WARNING"
    assert (record.batch_id, record.node_id) == (document["batch_id"], str(node.id))
    assert record.field == "windows[0].samples_ok"
    assert "refused (422 invalid_batch)" in record.getMessage()


@pytest.mark.parametrize("timestamp", ["9" * 400, "１２３", "-1", "1e9", " 1"])
def test_a_timestamp_header_that_is_not_unix_seconds_is_401(node, post, timestamp):
    response = post(node, doc_for(node), headers={"X-Steward-Timestamp": timestamp})
    assert response.status_code == 401
    assert "X-Steward-Timestamp" in response.json()["detail"]
    assert not IngestBatch.objects.exists()

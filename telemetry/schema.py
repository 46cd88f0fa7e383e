"""Batch body schemas 1 and 2 (and the enrolment body's), decoded by msgspec into typed
structs (no generic walk).

Each field carries its own bounds, so a NaN, a negative counter or a 101 % utilization fails
decoding with the path of the field (``$.windows[3].util_gpu.max``). Cross-field
impossibilities (min > max, more samples than expected, an observed span that ends before it
begins) are the worker's to reject, per window.
Unknown fields are ignored, so agents may add fields before the server reads them; that is
also why a schema-1 body's ``observed_*``/``util_method`` keys are ignored: schema 1 does not
define them.
Before msgspec recurses into a body received, ``telemetry.jsonguard`` measures its nesting
without recursion and refuses bytes that are not UTF-8; after, it refuses duplicate keys and
text PostgreSQL cannot store, and the caps below apply (docs/agent.md 5.3).
Structs are ``gc=False`` (they hold no cycles): the worker decodes millions of them, and the
cyclic collector walking them would cost more than the decoding.

The two schemas are one tagged union on ``schema``: msgspec reads the tag and decodes the rest
straight into ``BatchV1`` or ``BatchV2``, so neither pays for the other.
"""

from __future__ import annotations

import datetime as dt
import gzip
import math
import re
import sys
import uuid
import zlib
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from telemetry.jsonguard import (
    Constant,
    JsonRefused,
    depth_check,
    duplicate_key_check,
    is_number,
    lenient,
    stored_value_check,
    text_check,
    text_problem,
    utf8_check,
    walk,
)

SCHEMA_VERSIONS = (1, 2)
# What one batch may hold (docs/agent.md 5.3): far above what an agent seals (a minute of a
# node's GPUs live, 2,000 windows a batch when it backfills, every XID a tick can read), low
# enough that a batch fits one chunk of the worker. Checked on receipt only: a batch stored
# before the caps is processed as it was accepted.
MAX_WINDOWS = 10_000
MAX_EVENTS = 20_000
# Characters of each key and text in an event's detail (the agent cuts messages at 500).
MAX_DETAIL_TEXT = 1_000

AwareDatetime = Annotated[dt.datetime, msgspec.Meta(tz=True)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
SmallCount = Annotated[int, msgspec.Meta(ge=0, le=32_767)]
Celsius = Annotated[float, msgspec.Meta(ge=-273.15, le=250)]
Megahertz = Annotated[float, msgspec.Meta(ge=0, le=100_000)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=100_000)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
ShortText = Annotated[str, msgspec.Meta(max_length=200)]
# What the node's status keeps of the agent's versions (``NodeStatus``: 64 characters).
VersionText = Annotated[str, msgspec.Meta(max_length=64)]
GpuUuid = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
UtilMethod = Literal["buffer", "instant", "mixed"]


class PercentStats(msgspec.Struct, frozen=True, gc=False):
    min: Percent
    avg: Percent
    max: Percent


class ByteStats(msgspec.Struct, frozen=True, gc=False):
    min: Bytes
    avg: Annotated[float, msgspec.Meta(ge=0, le=2**63 - 1)]
    max: Bytes


class PowerStats(msgspec.Struct, frozen=True, gc=False):
    avg: Watts
    max: Watts
    min: Watts | None = None


class CelsiusStats(msgspec.Struct, frozen=True, gc=False):
    min: Celsius
    avg: Celsius
    max: Celsius


class ClockStats(msgspec.Struct, frozen=True, gc=False):
    min: Megahertz
    avg: Megahertz
    max: Megahertz


class Window(msgspec.Struct, frozen=True, gc=False):
    gpu_uuid: GpuUuid
    window_start: AwareDatetime
    samples_ok: SmallCount
    samples_expected: SmallCount
    state: Literal["up", "degraded", "down"]
    state_reason: ShortText | None = None
    util_gpu: PercentStats | None = None
    util_mem: PercentStats | None = None
    mem_used_bytes: ByteStats | None = None
    mem_total_bytes: Bytes | None = None
    power_w: PowerStats | None = None
    energy_mj: Count | None = None
    temp_c: CelsiusStats | None = None
    clock_sm_mhz: ClockStats | None = None
    clock_mem_mhz: ClockStats | None = None
    throttle_reasons: Count | None = None
    ecc_corrected: Count | None = None
    ecc_uncorrected: Count | None = None
    remapped_rows_correctable: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    remapped_rows_uncorrectable: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    # NVML reports "pending" as 0/1; the contract says bool. Both are accepted.
    remapped_rows_pending: bool | Annotated[int, msgspec.Meta(ge=0, le=1)] | None = None
    retired_pages: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    pcie_replays: Count | None = None
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=32_767)] | None = None

    # What a schema-1 window says, read as schema 2 (WindowV2 has them as fields): v1 agents
    # do not say which seconds they observed, so the whole minute as far as the server can
    # tell, and they only ever read utilization instantaneously. Not fields: a v1 body's keys
    # of these names are ignored, and the worker reads every window the same way.
    observed_from: ClassVar[int] = 0
    observed_to: ClassVar[int] = 60

    @property
    def util_method(self) -> UtilMethod | None:
        return None if self.util_gpu is None and self.util_mem is None else "instant"


class WindowV2(Window, frozen=True, gc=False, kw_only=True):
    """A schema-2 window: a schema-1 window that also says which seconds of its minute the
    agent observed, ``[window_start + observed_from, window_start + observed_to)``, and how
    its utilization was measured. The three keys are required (``util_method`` may be null).
    ``observed_from < observed_to`` and "``util_method`` null iff no utilization" are
    cross-field: the worker rejects such a window, alone."""

    # Fields here, constants on Window (mypy would have a ClassVar stay one).
    observed_from: Annotated[int, msgspec.Meta(ge=0, le=59)]  # type: ignore[misc]
    observed_to: Annotated[int, msgspec.Meta(ge=1, le=60)]  # type: ignore[misc]
    util_method: UtilMethod | None


# Any kind decodes (a newer agent must not lose a whole batch for it); the worker keeps the
# kinds ``TelemetryEvent.Kind`` names and rejects any other event alone, with its reason, for
# an operator to see.
EventKind = Annotated[str, msgspec.Meta(min_length=1, max_length=20)]


class Event(msgspec.Struct, frozen=True, gc=False):
    event_id: uuid.UUID
    kind: EventKind
    occurred_at: AwareDatetime
    gpu_uuid: GpuUuid | None = None
    xid: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    detail: dict[str, Any] = {}


class Agent(msgspec.Struct, frozen=True, gc=False):
    version: VersionText | None = None
    driver_version: VersionText | None = None
    cuda_version: VersionText | None = None


class _Batch(msgspec.Struct, frozen=True, gc=False, tag_field="schema"):
    batch_id: uuid.UUID
    agent: Agent
    events: list[Event] = []
    # The contract names node_id and sent_at; when given, node_id must match the signed header.
    node_id: uuid.UUID | None = None
    sent_at: AwareDatetime | None = None
    # The agent as built spells the body's creation time sealed_at: accepted as well.
    sealed_at: AwareDatetime | None = None


class BatchV1(_Batch, frozen=True, gc=False, tag=1):
    SCHEMA: ClassVar[int] = 1
    windows: list[Window] = []


class BatchV2(_Batch, frozen=True, gc=False, tag=2):
    SCHEMA: ClassVar[int] = 2
    windows: list[WindowV2] = []


Batch = BatchV1 | BatchV2


_decoder: msgspec.json.Decoder[BatchV1 | BatchV2] = msgspec.json.Decoder(Batch)
# The instants a batch may name (UTC): far wider than any clock skew, narrow enough that
# every one converts to UTC and back.
INSTANTS = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2100, 1, 1, tzinfo=dt.UTC))
_UTC = dt.timedelta(0)  # the only offset a batch's times may have
_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_V2_KEYS = frozenset(WindowV2.__struct_fields__) - frozenset(Window.__struct_fields__)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_WINDOW = re.compile(r"^windows\[(?P<index>\d+)\]")
_BYTE = re.compile(r"\(byte (\d+)\)")


class BodyTooLarge(Exception):
    """The body inflates beyond the configured limit (a gzip bomb, or a runaway agent)."""


@dataclass(frozen=True)
class SchemaError(Exception):
    """What is wrong, and where: ``field`` is a path such as ``windows[3].util_gpu.max``."""

    detail: str
    field: str = ""
    window: dict[str, Any] | None = None


def inflate(body: bytes, *, limit: int, whole: bool = False) -> bytes:
    """gunzip with a ceiling on the inflated size. ``whole`` (on receipt): the body must be
    one gzip member with nothing after it — a second member or trailing bytes are not what an
    agent sends, and a body is kept as it came."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        raw = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise SchemaError(f"The body is not valid gzip: {exc}.") from None
    if len(raw) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(f"The body inflates to more than {limit} bytes.")
    if not inflater.eof:
        raise SchemaError("The body is truncated gzip.")
    if whole and inflater.unused_data:
        raise SchemaError(
            f"The body is not one whole gzip stream: {len(inflater.unused_data)} byte(s) "
            "follow its end."
        )
    return raw


def batch_decode(raw: bytes, *, checked: bool = False) -> Batch:
    """Decodes inflated JSON into a Batch, or raises SchemaError naming the field and window.

    On receipt the bytes are checked before the decoder recurses into them (nesting depth,
    UTF-8), then after it (duplicate keys, text PostgreSQL cannot store, the caps, detail).
    ``checked``: the body passed this function on receipt, so every check beyond the typed
    decode is skipped (the worker re-decodes every stored body).
    """
    if not checked:
        try:
            depth_check(raw)
            utf8_check(raw)
        except JsonRefused as exc:
            raise _refused(exc, raw) from None
    try:
        batch = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _schema_error(str(exc), raw) from None
    except msgspec.DecodeError as exc:
        raise _decode_error(str(exc), raw) from None
    if checked:
        return batch
    try:
        duplicate_key_check(raw)
    except JsonRefused as exc:
        raise _refused(exc, raw) from None
    found = text_check(raw)  # rare: only then is every string looked at
    if found is not None:
        raise _refused(JsonRefused(found[1], field=found[0]), raw)
    _caps_check(batch)
    low, high = INSTANTS
    for index, window in enumerate(batch.windows):
        start = window.window_start
        # The common case in a few comparisons; which check failed is worked out only then.
        if (
            start.second
            or start.microsecond
            or start.utcoffset() != _UTC
            or not low <= start < high
        ):
            _window_start_refuse(index, window)
    for index, event in enumerate(batch.events):
        _instant_check(event.occurred_at, f"events[{index}].occurred_at")
    for name in ("sent_at", "sealed_at"):
        at = getattr(batch, name)
        if at is not None:
            _instant_check(at, name)
    return batch


def _window_start_refuse(index: int, window: Window) -> None:
    start = window.window_start
    field = f"windows[{index}].window_start"
    if start.second or start.microsecond:
        raise SchemaError(
            "window_start must be aligned to the minute (…:00Z).",
            field=field,
            window=_window_ref(index, window.gpu_uuid, start.isoformat()),
        )
    _instant_check(start, field, index, window.gpu_uuid)


def _instant_check(at: dt.datetime, field: str, index: int = -1, gpu_uuid: str = "") -> None:
    """Every time in a batch is UTC (``Z`` or ``+00:00``) and within ``INSTANTS``.

    Another offset names the same instant, but the worker files windows by UTC day and hour,
    and the contract says UTC. A year such as 0001 in another zone is BC in UTC: PostgreSQL
    stores it, and then no Python datetime can read it back."""
    problem = ""
    if at.utcoffset() != _UTC:
        problem = f"must be in UTC (…Z), not {at.isoformat()}"
    elif not INSTANTS[0] <= at < INSTANTS[1]:
        problem = (
            f"{at.isoformat()} is outside {INSTANTS[0]:%Y}–{INSTANTS[1]:%Y}: check the node's clock"
        )
    if problem:
        window = _window_ref(index, gpu_uuid, at.isoformat()) if index >= 0 else None
        raise SchemaError(f"{field.rsplit('.', 1)[-1]} {problem}.", field=field, window=window)


def batch_decode_gzip(body: bytes, *, limit: int, checked: bool = False) -> Batch:
    return batch_decode(inflate(body, limit=limit, whole=not checked), checked=checked)


def gzip_json(document: Any) -> bytes:
    """gzip(JSON) the way agents send it (tests, benchmarks)."""
    return gzip.compress(msgspec.json.encode(document), compresslevel=6, mtime=0)


def _caps_check(batch: Batch) -> None:
    """Windows and events per batch, and what an event's detail holds: the detail is stored
    as it came (jsonb), so its texts are bounded and its numbers fit every JSON reader."""
    for name, cap in (("windows", MAX_WINDOWS), ("events", MAX_EVENTS)):
        count = len(getattr(batch, name))
        if count > cap:
            raise SchemaError(
                f"A batch holds at most {cap:,} {name}; this one has {count:,}: seal smaller "
                "batches.",
                field=name,
            )
    for index, event in enumerate(batch.events):
        if event.detail:
            try:
                stored_value_check(
                    event.detail, path=f"events[{index}].detail", max_text=MAX_DETAIL_TEXT
                )
            except JsonRefused as exc:
                raise SchemaError(exc.detail, field=exc.field) from None


def _refused(exc: JsonRefused, raw: bytes) -> SchemaError:
    """A JsonRefused as the endpoint answers it: with the window the field is in, if any."""
    window = _window_at(exc.field, raw) if exc.field else None
    return SchemaError(exc.detail, field=exc.field, window=window)


def json_error(exc: msgspec.MsgspecError, raw: bytes) -> SchemaError:
    """What a request's JSON body breaks, named as the batch endpoint names it: a value of the
    wrong type or out of bounds, a missing key (``field`` the path), or JSON msgspec refuses
    (``field`` set when it is half a surrogate pair or a non-finite number, which a lenient
    reading places; empty when the bytes are not JSON at all). For other request bodies."""
    if isinstance(exc, msgspec.ValidationError):
        return _schema_error(str(exc), raw)
    return _decode_error(str(exc), raw)


# The enrolment body (docs/agent.md 5.1).
ENROL_MAX_BODY_BYTES = 256 * 1024
ENROL_MAX_GPUS = 256
ENROL_MAX_TEXT = 200  # characters of each key and text in ``gpus``
BootstrapTokenText = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class _EnrolToken(msgspec.Struct, frozen=True):
    """Only the token: read first, so that no one without one reaches the rest."""

    bootstrap_token: BootstrapTokenText


class EnrolRequest(msgspec.Struct, frozen=True):
    bootstrap_token: BootstrapTokenText
    hostname: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    gpus: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=ENROL_MAX_GPUS)] = []
    agent_version: Annotated[str, msgspec.Meta(max_length=64)] | None = None


_enrol_token_decoder = msgspec.json.Decoder(_EnrolToken)
_enrol_decoder = msgspec.json.Decoder(EnrolRequest)


def enrol_decode(body: bytes) -> EnrolRequest:
    """The whole enrolment body, typed (after its token was found good)."""
    return _enrol_decoder.decode(body)


def enrol_token_read(body: bytes) -> str:
    """An enrolment body's bootstrap token, every other value skipped: read before the rest
    is decoded, so that no one without a good token reaches it (the view answers a
    ValidationError 422, a DecodeError or UnicodeDecodeError 400). The body must be JSON;
    half a surrogate pair or a non-finite number elsewhere in it (which msgspec refuses as
    malformed, and the batch endpoint answers with 422 naming the field) is let through to
    the checks after the token, which name it: the token is read then from a lenient reading
    of the body."""
    try:
        return _enrol_token_decoder.decode(body).bootstrap_token
    except msgspec.DecodeError as exc:
        error = json_error(exc, body)
        if not error.field:
            raise
        if error.field == "bootstrap_token":
            detail = error.detail.rstrip(".")
            raise msgspec.ValidationError(f"{detail} - at `$.bootstrap_token`") from None
    pairs = lenient(body)
    found = dict(pairs) if isinstance(pairs, list) else {}
    if "bootstrap_token" not in found:
        raise msgspec.ValidationError("Object missing required field `bootstrap_token`")
    token = found["bootstrap_token"]
    if type(token) is str:  # ``lenient`` reads numbers and NaN as str subclasses
        if any("\udc80" <= c <= "\udcff" for c in token):  # bytes that were not UTF-8
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "bootstrap_token")
        if any("\ud800" <= c <= "\udfff" for c in token):
            detail = text_problem(token).rstrip(".")
            raise msgspec.ValidationError(f"{detail} - at `$.bootstrap_token`")
        # The token's own bounds, from its one type.
        return _enrol_token_decoder.decode(
            msgspec.json.encode({"bootstrap_token": token})
        ).bootstrap_token
    got = (
        "`null`" if token is None
        else "`bool`" if isinstance(token, bool)
        else "a number" if isinstance(token, str)  # a number's text, or NaN
        else "an array or object"
    )  # fmt: skip
    raise msgspec.ValidationError(f"Expected `str`, got {got} - at `$.bootstrap_token`")


def _decode_error(message: str, raw: bytes) -> SchemaError:
    """Not JSON. Half a surrogate pair (which msgspec refuses as malformed), NaN and
    ±Infinity (which Python's json writes for non-finite floats) are named with their field."""
    try:
        found = text_check(raw)
    except ValueError:
        found = None
    if found is not None:
        return _refused(JsonRefused(found[1], field=found[0]), raw)
    where = _BYTE.search(message)
    if where and raw[int(where.group(1)) :].lstrip(b"-")[:1] in (b"N", b"I"):
        try:
            document = lenient(raw)
        except ValueError:
            document = None
        for path, value, _ in walk(document):
            if isinstance(value, Constant):
                return _refused(
                    JsonRefused(f"{value} is not valid JSON: numbers must be finite.", path),
                    raw,
                )
    return SchemaError(f"The body is not valid JSON: {message}.")


def _window_ref(index: int, gpu_uuid: object, window_start: object) -> dict[str, Any]:
    return {"index": index, "gpu_uuid": gpu_uuid, "window_start": window_start}


def _schema_error(message: str, raw: bytes) -> SchemaError:
    match = _PATH.search(message)
    path = match.group("path") if match else ""
    detail = message[: match.start()] if match else message
    missing = _MISSING.match(detail)
    if missing:  # the field is the one missing, not the object it is missing from
        name = missing.group("name")
        path = f"{path}.{name}" if path else name
        detail = f"{name} is required"
        if name in _V2_KEYS:
            detail += " in a schema-2 window (util_method may be null)"
    elif path == "schema" and detail.startswith("Invalid value"):
        versions = " or ".join(str(v) for v in SCHEMA_VERSIONS)
        detail = f"schema must be {versions}; {detail[len('Invalid value ') :]} is not one"
    elif "[...]" in path:  # msgspec does not name a key of a free-form object (a detail)
        path = _number_out_of_range_at(path.split("[...]", 1)[0], raw) or path
    return SchemaError(f"{detail}.", field=path, window=_window_at(path, raw))


def _number_out_of_range_at(prefix: str, raw: bytes) -> str:
    """The path of the first number under ``prefix`` that no float or int holds."""
    try:
        document = lenient(raw)
    except ValueError:
        return ""
    for path, value, _ in walk(document):
        if path.startswith(prefix) and is_number(value):
            if any(c in value for c in ".eE"):
                if math.isinf(float(value)):
                    return path
            elif len(value.lstrip("-")) > sys.get_int_max_str_digits():
                return path
    return ""


def _window_at(path: str, raw: bytes) -> dict[str, Any] | None:
    """The window a field path such as ``windows[3].state`` is in, named by its index, GPU
    and minute as a lenient parse of the body gives them; None outside a window. Only on the
    error path, and best effort: the index alone where the body says no more."""
    found = _WINDOW.match(path)
    if not found:
        return None
    index = int(found.group("index"))
    try:
        item = dict(dict(lenient(raw))["windows"][index])
        gpu_uuid, window_start = item.get("gpu_uuid"), item.get("window_start")
    except (ValueError, TypeError, KeyError, IndexError):
        gpu_uuid = window_start = None
    return _window_ref(index, gpu_uuid, window_start)

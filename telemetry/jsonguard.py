"""JSON bytes from an untrusted client, checked before any decoder recurses into them.

msgspec and the standard library decode nested arrays and objects by recursion: a body nested
100,000 deep ends in a RecursionError, an answer of 500, and an agent retrying that batch
forever. So the nesting depth is measured first, on the bytes, without recursion and in C for
all but the brackets; then the decoders run on bodies at most ``MAX_DEPTH`` deep. Everything
here that walks a decoded document walks it with a list, not with recursion.

Errors are ``JsonRefused(detail, field)``; ``field`` is a path such as ``events[0].detail.a``.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

# Arrays and objects nested in one another, the document's own object or array counting as 1.
# A batch nests 5 deep (body, events, event, detail, a detail's object); an enrolment 3.
MAX_DEPTH = 32
# Integers a client may put where the server stores JSON as it came (an event's detail, an
# enrolment's GPUs): what a signed 64-bit integer holds, as every JSON reader reads it alike.
MAX_JSON_INT = 2**63 - 1

# Brackets inside strings are not structure. Escape pairs are removed first (so `\"` is not a
# quote), then every byte but quotes and brackets; a string that held no bracket is then
# `""`. Only when some string held one are the strings cut out by a pattern (slower).
_ESCAPE = re.compile(rb"\\.", re.S)
_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
_ONE_KIND = bytes.maketrans(b"[]{}", b"()()")
_LEVEL = bytes.maketrans(b"()", b"\x01\xff")  # +1 and -1 as signed bytes
_CHUNK = 1 << 20
# What may stand for a NUL or half a surrogate pair once decoded: only then are strings read.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


class JsonRefused(Exception):
    """What is wrong with the JSON, and where (a path such as ``windows[3].state``)."""

    def __init__(self, detail: str, field: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


def depth_check(raw: bytes, *, limit: int = MAX_DEPTH) -> None:
    """Refuses a document nested deeper than ``limit``, counting without recursion.

    Where the bytes are not JSON the count may be too high (a body refused as too deep rather
    than as malformed) but never too low up to the first byte a JSON decoder refuses, so no
    decoder given bytes that pass ever nests deeper than ``limit``."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return  # not even that many brackets: the common small body
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    kept = raw.translate(None, _NOT_STRUCTURE)
    structure = kept.replace(b'""', b"")
    if b'"' in structure:  # some string held a bracket: cut the strings out properly
        structure = _STRING.sub(b"", kept)
    # Empty arrays and objects, and those holding only scalars (a window's gauges), are one
    # level each: removed at once, the rest is one level shallower and often far shorter.
    structure = structure.translate(_ONE_KIND, b'"').replace(b"()", b"")
    level = 0
    for start in range(0, len(structure), _CHUNK):  # stops at the first chunk too deep
        steps = array("b", structure[start : start + _CHUNK].translate(_LEVEL))
        if max(accumulate(steps, initial=level)) > limit - 1:
            raise JsonRefused(
                f"The JSON nests arrays and objects more than {limit} deep (the document "
                "itself counts as 1)."
            )
        level += sum(steps)


def utf8_check(raw: bytes) -> None:
    """Refuses bytes that are not UTF-8, naming the first bad byte and, where it can be
    told, the field whose text holds it."""
    if raw.isascii():
        return
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        field = _field_of_bad_utf8(raw)
        raise JsonRefused(
            f"The JSON is not valid UTF-8: byte {exc.start} (0x{raw[exc.start]:02x}) {exc.reason}.",
            field=field,
        ) from None


def duplicate_key_check(raw: bytes) -> None:
    """Refuses an object with the same key twice. JSON readers disagree on which copy
    counts (msgspec and PostgreSQL keep the last, some keep the first), and a signed batch
    must mean one thing to all of them. Needs ``depth_check`` and ``utf8_check`` first."""
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs, parse_constant=_ignore, **_NUMBERS)
    except _DuplicateKey as exc:
        path = next((path for path, value, _ in walk(lenient(raw)) if value is _DUPLICATE), "")
        raise JsonRefused(f"The key {exc.key!r} appears twice in one object.", field=path) from None
    except ValueError:
        return  # not JSON: the typed decoder says so, with its own words


def text_check(raw: bytes) -> tuple[str, str] | None:
    """(path, problem) of the first text, key or value, that PostgreSQL cannot store: a NUL
    character, or half a surrogate pair (escaped as ``\\ud800``: valid JSON, no character).
    Only bodies with such an escape are read at all."""
    if not _SUSPECT_ESCAPE.search(raw):
        return None
    for path, value, _ in walk(lenient(raw)):
        if isinstance(value, str) and not isinstance(value, _Number):
            problem = text_problem(value)
            if problem:
                return path, problem
    return None


def text_problem(text: str) -> str:
    if "\x00" in text:
        return "Text must not contain the NUL character (\\u0000)."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Text must not contain half a surrogate pair (\\ud800–\\udfff alone)."
    return ""


def stored_value_check(value: Any, *, path: str, max_text: int) -> None:
    """Refuses what the server would store as JSON as it came but should not: text over
    ``max_text`` characters, NUL or half a surrogate pair (keys too), an integer beyond a
    signed 64-bit one, a float that is not finite."""
    for here, item, is_key in walk(value, path):
        if isinstance(item, str):
            what = "key" if is_key else "text"
            if len(item) > max_text:
                raise JsonRefused(
                    f"A {what} of {len(item)} characters; at most {max_text}.", field=here
                )
            problem = text_problem(item)
            if problem:
                raise JsonRefused(problem, field=here)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_JSON_INT:
                raise JsonRefused(
                    f"An integer beyond ±{MAX_JSON_INT} (a signed 64-bit integer).", field=here
                )
        elif isinstance(item, float) and item - item != 0.0:
            raise JsonRefused("Numbers must be finite.", field=here)


def walk(document: Any, path: str = "") -> Iterator[tuple[str, Any, bool]]:
    """(path, value, is_key) of every key and scalar in document order, without recursion.
    Objects may be dicts or ``lenient``'s pairs."""
    stack: list[tuple[Any, str, bool]] = [(document, path, False)]
    while stack:
        value, here, is_key = stack.pop()
        if isinstance(value, dict):
            value = _Pairs(value.items())
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            children: list[tuple[Any, str, bool]] = []
            for key, item in value:
                at = f"{here}.{key}" if here else str(key)
                # a key seen before in this object stands for itself and for the duplicate
                children.append((_DUPLICATE if key in seen else key, at, True))
                children.append((item, at, False))
                seen.add(key)
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{here}[{i}]", False) for i, item in reversed(list(enumerate(value)))
            )
        else:
            yield here, value, is_key


def lenient(raw: bytes | str) -> Any:
    """The document as far as it can be read, for naming the field of an error: objects as
    lists of pairs (duplicates kept), numbers as their text, NaN and Infinity as constants,
    bytes that are not UTF-8 as lone surrogates. Needs ``depth_check`` first."""
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
    return json.loads(text, object_pairs_hook=_Pairs, parse_constant=Constant, **_LENIENT)


class Constant(str):
    """NaN, Infinity or -Infinity where JSON has only finite numbers."""


class _Number(str):
    """A number's text as it came (``lenient``)."""


def is_number(value: object) -> bool:
    """Whether a value of a ``lenient`` reading is a number (its text), not a string."""
    return isinstance(value, _Number)


class _Pairs(list[tuple[str, Any]]):
    """An object's pairs in order, duplicates kept (``lenient``)."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


_DUPLICATE = object()  # walk()'s value for the second copy of a key
_NUMBERS: dict[str, Any] = {"parse_int": len, "parse_float": len}  # values unused: no cost
_LENIENT: dict[str, Any] = {"parse_int": _Number, "parse_float": _Number}


def _unique_pairs(pairs: list[tuple[str, Any]]) -> None:
    if len({key for key, _ in pairs}) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)


def _ignore(_: str) -> None:
    return None


def _field_of_bad_utf8(raw: bytes) -> str:
    """The path of the first key or text holding a byte that is not UTF-8 (decoded as a lone
    surrogate U+DC80–U+DCFF), or "" where the rest is not JSON either."""
    try:
        document = lenient(raw)
    except ValueError:
        return ""
    for path, value, _ in walk(document):
        if isinstance(value, str) and any("\udc80" <= c <= "\udcff" for c in value):
            return path
    return ""

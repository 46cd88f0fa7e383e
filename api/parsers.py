"""The API's one body parser: JSON checked before any decoder recurses into it.

DRF's ``JSONParser`` hands the body to ``json.load``, which recurses: a body nested a few
thousand deep ended in a RecursionError and a 500. Here the body is measured first, on its
bytes and without recursion (``telemetry.jsonguard``, the checks the ingest endpoint uses),
and refused with a 400 naming the problem: nested deeper than ``MAX_DEPTH``, not UTF-8, not
JSON, NaN or Infinity, or a key twice in one object.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from telemetry.jsonguard import JsonRefused, depth_check, duplicate_key_check, utf8_check


def _no_constant(name: str) -> None:
    raise JsonRefused(f"{name} is not a number JSON allows.")


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            depth_check(raw)
            utf8_check(raw)
            duplicate_key_check(raw)
            return json.loads(raw, parse_constant=_no_constant)
        except JsonRefused as exc:
            where = f" (at {exc.field})" if exc.field else ""
            raise ParseError(f"The body is refused: {exc.detail}{where}") from None
        except ValueError as exc:  # JSONDecodeError: not JSON at all
            raise ParseError(f"The body is not JSON: {exc}.") from None

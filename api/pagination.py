"""Cursor pagination: stable under inserts, opaque ``next``/``previous`` links."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import ValidationError as BadQuery
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request


class ApiCursorPagination(CursorPagination):
    """DRF's cursor pagination, with the cursor's position checked before any query.

    A cursor is opaque but not signed: a client can send any position. DRF answers a cursor
    it cannot decode with 404 "Invalid cursor"; a position that decodes but is not a value of
    the ordering field (``p=garbage`` or an instant without its offset for a timestamp, a NUL
    byte) would otherwise reach the database and fail there with a 500. It gets the same
    404.

    ``limit`` must be a whole number of at least 1 (else 400, naming it); one over
    ``max_page_size`` is capped to it, not refused."""

    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 500
    page_size_query_description = (
        f"Results per page: a whole number from 1 (default {page_size}); more than "
        f"{max_page_size} counts as {max_page_size}."
    )
    ordering = "pk"

    def paginate_queryset(
        self, queryset: Any, request: Request, view: Any = None
    ) -> list[Any] | None:
        self._rows = queryset
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request: Request) -> int:
        text = request.query_params.get(self.page_size_query_param, "")
        if text == "":
            return self.page_size
        digits = text.lstrip("0") if text.isascii() and text.isdigit() else ""
        if not digits:
            raise BadQuery(
                {
                    self.page_size_query_param: [
                        f"Give a whole number from 1 to {self.max_page_size} (default "
                        f"{self.page_size}; a larger one counts as {self.max_page_size})."
                    ]
                }
            )
        # Seven digits are past any maximum; a longer number is not parsed whole.
        return min(int(digits[:7]), self.max_page_size)

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            field = _field_of(self._rows, self.ordering[0].lstrip("-"))
            position = str(cursor.position)  # as DRF decodes it: text
            try:
                if "\x00" in position:
                    raise ValidationError("NUL in a cursor position")
                value = position if field is None else field.to_python(position)
                if isinstance(value, datetime) and value.tzinfo is None:
                    raise ValidationError("a cursor's instant carries its offset")
                offset = value.utcoffset() if isinstance(value, datetime) else None
                if offset is not None and offset % timedelta(minutes=1):
                    # Ours are always +00:00. Django binds parameters as text, and PostgreSQL
                    # rejects an offset with a fraction of a second: a 500, not a position.
                    raise ValidationError("a cursor's offset is in whole minutes")
            except ValidationError as exc:
                raise NotFound(self.invalid_cursor_message) from exc
            # The parsed value goes on to the rows' filter, so no one parses the text again
            # (PostgreSQL reads some ISO forms differently from Python, or not at all).
            cursor = cursor._replace(position=value)  # type: ignore[arg-type]  # stubs say int
        return cursor


def _field_of(rows: Any, name: str) -> models.Field[Any, Any] | None:
    """The model field (or annotation's output field) that ``rows`` are ordered by, if known."""
    model = getattr(rows, "model", None)
    if model is None:
        return None
    try:
        field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    except FieldDoesNotExist:
        query = getattr(rows, "query", None)
        annotation = getattr(query, "annotations", {}).get(name)
        return getattr(annotation, "output_field", None)
    return field if isinstance(field, models.Field) else None


class ApiOrderingFilter(OrderingFilter):
    """DRF's ``ordering=``, with the id as the last key in the first key's direction.

    Rows equal in the field asked for (statements published in one run, GPUs created in one
    import) would otherwise come in whatever order PostgreSQL finds them, which can differ
    between two requests for consecutive pages. An ordering that already ends in the id (a
    view's default, such as the statements' ``-period_start, id``) is kept as it is.

    A field the list does not order by is a 400 that names the ones it does (DRF would drop
    it silently and use the default)."""

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        allowed = list(getattr(view, "ordering_fields", ()))
        for parameter in parameters:
            if parameter["name"] == self.ordering_param:
                parameter["description"] = (
                    f"Order by {', '.join(allowed)}; a leading - reverses. Anything else is a 400."
                    if allowed
                    else "This list has one order: any value is a 400."
                )
        return parameters

    def remove_invalid_fields(
        self, queryset: Any, fields: Iterable[str], view: Any, request: Request
    ) -> list[str]:
        """DRF's hook for the terms asked for: refused, not dropped."""
        fields = list(fields)
        allowed = [name for name, _ in self.get_valid_fields(queryset, view, {"request": request})]
        unknown = [term for term in fields if term.removeprefix("-") not in allowed]
        if unknown:
            choices = ", ".join(f"{name}, -{name}" for name in allowed)
            raise BadQuery(
                {
                    self.ordering_param: [
                        f"Cannot order by {', '.join(unknown)}; "
                        + (f"order by one of {choices}." if allowed else "this list has one order.")
                    ]
                }
            )
        return fields

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> list[str] | None:
        ordering = super().get_ordering(request, queryset, view)
        if not ordering:
            return None
        if ordering[-1].lstrip("-") in ("id", "pk"):
            return list(ordering)
        return [*ordering, "-id" if ordering[0].startswith("-") else "id"]

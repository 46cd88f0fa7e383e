"""Column types of the ledger: money as exact decimals with cents, wide enough for any
fleet's totals; large documents written once as JSON text."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models


def money_field(**options: Any) -> models.DecimalField[Decimal, Decimal]:
    return models.DecimalField(max_digits=18, decimal_places=2, **options)


class JsonTextField(models.JSONField):
    """A ``JSONField`` stored as PostgreSQL ``json`` rather than ``jsonb``: the text as
    written, checked to be JSON but not taken apart. For a large document written once and
    read whole — a statement's frozen inputs, ~43 KB each, nothing queried inside them — where
    ``jsonb`` only costs: storing a close's 1,000 frozen inputs took the database ~3 × the CPU
    as ``jsonb`` (docs/scaling.md). Reads give the same values: psycopg parses ``json`` itself,
    where Django parses the text it is given of ``jsonb``."""

    def db_type(self, connection: Any) -> str:
        return "json"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None or isinstance(value, str):
            return super().from_db_value(value, expression, connection)
        return value  # parsed by psycopg's ``json`` loader

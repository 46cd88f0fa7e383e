"""Money columns: exact decimals with cents, wide enough for any fleet's totals."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models


def money_field(**options: Any) -> models.DecimalField[Decimal, Decimal]:
    return models.DecimalField(max_digits=18, decimal_places=2, **options)

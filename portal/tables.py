"""Tables shown on portal pages, and the same tables as streamed CSV.

A page builds its tables from selector rows; the template renders them (caption, column
headers) and ``?export=<name>`` on the same URL, with the same filters, streams that table as
CSV with every row (not only the page shown).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.text import slugify

from core.instants import iso_z

# ---- formatting ----------------------------------------------------------------------------

DASH = "—"


def fmt_pct(value: Decimal | None, places: int = 2) -> str:
    """A 0–1 fraction as a percentage: Decimal("0.9734") → "97.34 %"."""
    if value is None:
        return DASH
    quantum = Decimal(1).scaleb(-places)
    return f"{(value * 100).quantize(quantum, rounding=ROUND_HALF_EVEN)} %"


def fmt_hours(seconds: int) -> str:
    return f"{(Decimal(seconds) / 3600).quantize(Decimal('0.1'), rounding=ROUND_HALF_EVEN)}"


def fmt_bps(bps: int) -> str:
    return f"{(Decimal(bps) / 100).quantize(Decimal('0.01'))} %"


def fmt_when(at: datetime | None) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if at else DASH


def fmt_second(at: datetime | None) -> str:
    """To the second: where telemetry ended (a window may be observed only to its :35)."""
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if at else DASH


def fmt_decimal(value: Decimal | float | None, places: int = 1) -> str:
    if value is None:
        return DASH
    quantum = Decimal(1).scaleb(-places)
    return str(Decimal(str(value)).quantize(quantum, rounding=ROUND_HALF_EVEN))


def fmt_money(amount: Decimal, currency: str) -> str:
    """An amount with its currency code, grouped, to the cent: "1,234.56 EUR", "−3.10 USD"
    (a true minus sign). ``portal.wording.MONEY`` finds amounts written this way."""
    cents = amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    sign = "−" if cents < 0 else ""
    return f"{sign}{abs(cents):,.2f} {currency}"


def csv_value(value: Any) -> str:
    """Raw values for spreadsheets: ISO instants, plain decimals, empty for none."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return iso_z(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    # A cell starting with these is run as a formula by spreadsheets: neutralise it.
    return (
        f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _number(text) else text
    )


def _number(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True


# ---- tables --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    label: str
    value: Callable[[Any], Any]  # what the CSV holds
    text: Callable[[Any], str] | None = None  # what the page shows (default: the value)
    link: Callable[[Any], str | None] | None = None
    numeric: bool = False
    badge: bool = False  # a state shown as a labelled badge
    csv_label: str = ""

    def cell(self, row: Any) -> Cell:
        value = self.value(row)
        shown = self.text(row) if self.text else ("" if value is None else str(value))
        return Cell(
            text=shown,
            link=self.link(row) if self.link else None,
            numeric=self.numeric,
            badge=slugify(str(value)) if self.badge else "",
        )


@dataclass(frozen=True)
class Cell:
    text: str
    link: str | None
    numeric: bool
    badge: str


@dataclass
class Table:
    name: str
    caption: str
    columns: list[Column]
    rows: Iterable[Any]
    empty: str = "Nothing to show."
    export_rows: Iterable[Any] | None = None  # every row, when ``rows`` is one page
    export_query: str = field(default="")
    basis_id: str = ""  # money in it: the id of the element stating the figures' basis

    def body(self) -> list[list[Cell]]:
        return [[column.cell(row) for column in self.columns] for row in self.rows]

    def csv_lines(self) -> Iterator[list[str]]:
        yield [c.csv_label or slugify(c.label).replace("-", "_") for c in self.columns]
        for row in self.export_rows if self.export_rows is not None else self.rows:
            yield [csv_value(c.value(row)) for c in self.columns]


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_response(table: Table, *, stamp: datetime) -> StreamingHttpResponse:
    writer = csv.writer(_Echo(), lineterminator="\r\n")
    response = StreamingHttpResponse(
        (writer.writerow(line) for line in table.csv_lines()), content_type="text/csv"
    )
    filename = f"steward-{table.name}-{stamp.astimezone(UTC):%Y%m%d-%H%M}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


def export_of(request: HttpRequest, tables: Iterable[Table]) -> Table | None:
    """The table ``?export=`` names, if the request asks for one of these."""
    wanted = request.GET.get("export")
    for table in tables:
        if table.name == wanted:
            return table
    return None


def with_export_links(request: HttpRequest, tables: Iterable[Table]) -> None:
    """Each table gets the page's own query with ``export=<name>``: the same filters."""
    for table in tables:
        query = request.GET.copy()
        query.pop("page", None)
        query["export"] = table.name
        table.export_query = query.urlencode()

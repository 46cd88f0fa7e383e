"""Statements: the list, one statement, and its downloads (PDF, CSV, JSON).

Every view is behind the disclosure gate (``earnings_view``) and resolves statements through
``portal.access.statement_for_user`` (another owner's statement answers 404). The page and the
three downloads are renderings of one report, ``billing.reports.statement_report``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import reverse
from django.utils.safestring import mark_safe

from billing.models import Statement
from billing.reports import Report, render_csv, render_json, render_pdf, statement_report
from billing.reports.report import COST_LABELS, period_name
from billing.reports.text import (
    FIGURE_NOTES,
    Place,
    amount,
    availability_bars,
    event_rows,
    hours,
    line_places,
    pct,
    status_line,
    terms_parts,
    utilization_bars,
)
from portal.access import statement_for_user, statements_for_user
from portal.tables import Cell, Column, Table, fmt_bps, fmt_when
from portal.views.common import earnings_view, table_page, the_user


def _item(row: Any, key: str) -> Any:
    return row[key]


def _attr(row: Any, key: str) -> Any:
    return getattr(row, key)


def _hours_column(label: str, key: str, *, of: Callable[[Any, str], Any] = _item) -> Column:
    """Seconds shown as hours, exported as the seconds themselves under ``key``."""
    return Column(
        label,
        lambda row: of(row, key),
        text=lambda row: hours(of(row, key)),
        numeric=True,
        csv_label=key,
    )


@earnings_view
def statements(request: HttpRequest) -> HttpResponseBase:
    user = the_user(request)
    rows = list(
        statements_for_user(user=user)
        .select_related("period", "owner")
        .order_by("-period__start", "owner__legal_name", "currency")
    )
    table = Table(
        name="statements",
        caption="Your published statements (final figures, net of hosting fee, power cost and "
        "management fee)",
        columns=[
            Column(
                "Period",
                lambda s: s.period.start,
                text=lambda s: period_name(s.period.start, s.period.end),
                link=lambda s: reverse("portal:statement", args=[s.pk]),
            ),
            Column("Account", lambda s: s.owner.legal_name),
            Column("Status", lambda s: "final", text=lambda s: "Final (published)"),
            Column(
                "Net of the GPU lines",
                lambda s: s.lines_total,
                text=lambda s: amount(s.lines_total, s.currency),
                numeric=True,
            ),
            Column(
                "Adjustments",
                lambda s: s.adjustments_total,
                text=lambda s: amount(s.adjustments_total, s.currency),
                numeric=True,
            ),
            Column(
                "Payouts",
                lambda s: s.payouts_total,
                text=lambda s: amount(s.payouts_total, s.currency),
                numeric=True,
            ),
            Column(
                "Balance carried forward",
                lambda s: s.closing_balance,
                text=lambda s: amount(s.closing_balance, s.currency),
                numeric=True,
            ),
            Column("Currency", lambda s: s.currency),
            Column("Published", lambda s: s.published_at, text=lambda s: fmt_when(s.published_at)),
        ],
        rows=rows,
        empty="No statement has been published for your accounts yet.",
    )
    return table_page(request, "portal/statements.html", {"count": len(rows)}, [table])


@earnings_view
def statement(request: HttpRequest, statement_id: Any) -> HttpResponseBase:
    found = statement_for_user(user=the_user(request), statement_id=statement_id)
    report = statement_report(found)
    tables = [
        _lines_table(report),
        _adjustments_table(report),
        _payouts_table(report),
        _days_table(report),
        _events_table(report),
    ]
    context = {
        "statement": found,
        "report": report,
        "status": status_line(report),
        "summary": _summary(report),
        "charts": [
            (title, mark_safe(svg))  # noqa: S308 - drawn by billing.reports.charts, escaped
            for title, svg in (
                ("Availability by day (%)", availability_bars(report)),
                ("Utilization by day, mean over up time (%)", utilization_bars(report)),
            )
        ]
        if report.days is not None
        else [],
        "notes": FIGURE_NOTES,
        "lines": _line_rows(tables[0], report),
        "downloads": [
            (
                "PDF",
                reverse("portal:statement-pdf", args=[found.pk]),
                "summary, tables, charts, basis and disclosure",
            ),
            ("CSV", reverse("portal:statement-csv", args=[found.pk]), "raw figures"),
            ("JSON", reverse("portal:statement-json", args=[found.pk]), "raw figures"),
        ],
    }
    return table_page(request, "portal/statement.html", context, tables)


def _summary(r: Report) -> list[tuple[str, str]]:
    return [
        ("Gross (your share of revenue, before costs)", amount(r.gross_total, r.currency)),
        *[
            (f"{label.capitalize()} (deducted)", amount(r.costs_total[name], r.currency))
            for name, label in COST_LABELS.items()
        ],
        ("Net of the GPU lines (gross minus costs)", amount(r.lines_total, r.currency)),
        ("Balance carried from before", amount(r.opening_balance, r.currency)),
        ("Adjustments", amount(r.adjustments_total, r.currency)),
        ("Payouts in the period (deducted)", amount(r.payouts_total, r.currency)),
        ("Balance carried forward (total)", amount(r.closing_balance, r.currency)),
    ]


def _money(name: str, label: str, currency: str) -> Column:
    return Column(
        label,
        lambda line: line[name],
        text=lambda line: amount(line[name], currency),
        numeric=True,
        csv_label=name,
    )


def _lines_table(r: Report) -> Table:
    places = line_places(r)  # a GPU that changed clusters: a line per cluster, each named

    def place(line: dict[str, Any]) -> Place:
        return places[line["position"]]

    return Table(
        name="lines",
        caption=f"Per GPU: hours, figures and money ({r.basis.finality}, {r.period_label})",
        columns=[
            Column(
                "GPU",
                lambda line: place(line).label,
                link=lambda line: reverse("portal:gpu", args=[line["gpu_id"]]),
            ),
            Column(
                "From",
                lambda line: place(line).starts_at,
                text=lambda line: fmt_when(place(line).starts_at),
            ),
            Column(
                "Until",
                lambda line: place(line).ends_at,
                text=lambda line: fmt_when(place(line).ends_at),
            ),
            Column(
                "Share",
                lambda line: line["share_bps"],
                text=lambda line: fmt_bps(line["share_bps"]),
                numeric=True,
                csv_label="share_bps",
            ),
            _hours_column("In service (h)", "in_service_s"),
            _hours_column("Up (h)", "up_s"),
            _hours_column("Down (h)", "down_s"),
            _hours_column("Maintenance (h)", "maintenance_s"),
            _hours_column("No data (h)", "no_data_s"),
            Column(
                "Availability",
                lambda line: line["availability"],
                text=lambda line: pct(line["availability"]),
                numeric=True,
            ),
            Column(
                "Utilization",
                lambda line: line["utilization"],
                text=lambda line: pct(line["utilization"]),
                numeric=True,
            ),
            Column(
                "Energy (kWh)",
                lambda line: line["energy_kwh"],
                text=lambda line: f"{line['energy_kwh'].quantize(Decimal('0.001'))}",
                numeric=True,
                csv_label="energy_kwh",
            ),
            _money("gross", "Gross", r.currency),
            _money("hosting_fee", "Hosting fee", r.currency),
            _money("power_cost", "Power cost", r.currency),
            _money("management_fee", "Management fee", r.currency),
            _money("net", "Net", r.currency),
        ],
        rows=[line for line in r.lines if line["kind"] == "gpu"],
        empty="No GPU lines on this statement.",
    )


# The columns the page shows in the per-GPU table: what the line is and its money, so the table
# fits a laptop screen. Each line's other figures (span, hours, utilization, energy) and its
# terms fold into an expandable row under it; the CSV export keeps every column.
_LINE_COLUMNS = (
    "GPU",
    "Share",
    "Availability",
    "Gross",
    "Hosting fee",
    "Power cost",
    "Management fee",
    "Net",
)


@dataclass(frozen=True)
class LineRow:
    """One GPU line as the page shows it: the table's cells, then the folded figures."""

    position: int
    description: str
    cells: list[Cell]
    details: list[tuple[str, str]]
    terms: list[str]


def _line_rows(table: Table, r: Report) -> dict[str, Any]:
    shown = [i for i, c in enumerate(table.columns) if c.label in _LINE_COLUMNS]
    folded = [i for i, c in enumerate(table.columns) if c.label not in _LINE_COLUMNS]
    terms = {
        line["position"]: terms_parts(t, r.currency)
        for line, t in zip(r.lines, r.terms, strict=True)
        if t is not None
    }
    lines = [line for line in r.lines if line["kind"] == "gpu"]
    rows = [
        LineRow(
            position=line["position"],
            description=line["description"],
            cells=[cells[i] for i in shown],
            details=[(table.columns[i].label, cells[i].text) for i in folded],
            terms=terms.get(line["position"], []),
        )
        for line, cells in zip(lines, table.body(), strict=True)
    ]
    return {"columns": [table.columns[i] for i in shown], "rows": rows}


def _adjustments_table(r: Report) -> Table:
    return Table(
        name="adjustments",
        caption="Adjustments in this period",
        columns=[
            Column(
                "Amount",
                lambda a: a["amount"],
                text=lambda a: amount(Decimal(a["amount"]), r.currency),
                numeric=True,
            ),
            Column("Reason", lambda a: a["reason"]),
            Column("Source", lambda a: a["source"]),
            Column("Corrects statement", lambda a: a["corrects_statement"]),
        ],
        rows=list(r.adjustments),
        empty="No adjustments in this period.",
    )


def _payouts_table(r: Report) -> Table:
    return Table(
        name="payouts",
        caption="Payouts in this period",
        columns=[
            Column("Paid on", lambda p: p["paid_on"]),
            Column("Reference", lambda p: p["reference"]),
            Column(
                "Amount",
                lambda p: p["amount"],
                text=lambda p: amount(Decimal(p["amount"]), r.currency),
                numeric=True,
            ),
        ],
        rows=list(r.payouts),
        empty="No payouts in this period.",
    )


def _days_table(r: Report) -> Table:
    return Table(
        name="days",
        caption="By day (UTC): your GPUs on this statement",
        columns=[
            Column("Day", lambda d: d.day.date(), text=lambda d: f"{d.day:%a %d %b %Y}"),
            _hours_column("In service (h)", "in_service_s", of=_attr),
            _hours_column("Up (h)", "up_s", of=_attr),
            _hours_column("Down (h)", "down_s", of=_attr),
            _hours_column("Maintenance (h)", "maintenance_s", of=_attr),
            _hours_column("No data (h)", "no_data_s", of=_attr),
            Column(
                "Availability",
                lambda d: d.availability,
                text=lambda d: pct(d.availability),
                numeric=True,
            ),
            Column(
                "Utilization",
                lambda d: d.utilization,
                text=lambda d: pct(d.utilization),
                numeric=True,
            ),
        ],
        rows=list(r.days or ()),
        empty="Daily figures are not available for this statement.",
    )


def _events_table(r: Report) -> Table:
    rows = list(zip(r.events or (), event_rows(r), strict=True))
    return Table(
        name="events",
        caption="Incidents and maintenance that touched your GPUs in the period",
        columns=[
            Column("Kind", lambda x: x[0].kind, text=lambda x: x[1][0]),
            Column(
                "Title",
                lambda x: x[0].title,
                link=lambda x: reverse(
                    "portal:incident" if x[0].kind == "incident" else "portal:maintenance-window",
                    args=[x[0].id],
                ),
            ),
            Column("Cause", lambda x: x[0].cause, text=lambda x: x[1][2]),
            Column("Started", lambda x: x[0].starts_at, text=lambda x: fmt_when(x[0].starts_at)),
            Column(
                "Ended",
                lambda x: x[0].ends_at,
                text=lambda x: fmt_when(x[0].ends_at) if x[0].ends_at else "open",
            ),
            Column("Your GPUs", lambda x: " ".join(x[0].gpus)),
        ],
        rows=rows,
        empty="None recorded with this statement."
        if r.events is None
        else "No incident or maintenance touched your GPUs in this period.",
    )


def _download(statement: Statement, body: bytes | str, content_type: str, ext: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    name = f"statement-{statement.period.start:%Y-%m}-{statement.currency}-{statement.pk}.{ext}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "private, no-store"
    return response


@earnings_view
def statement_pdf(request: HttpRequest, statement_id: Any) -> HttpResponseBase:
    found = statement_for_user(user=the_user(request), statement_id=statement_id)
    return _download(found, render_pdf(statement_report(found)), "application/pdf", "pdf")


@earnings_view
def statement_csv(request: HttpRequest, statement_id: Any) -> HttpResponseBase:
    found = statement_for_user(user=the_user(request), statement_id=statement_id)
    body = render_csv(statement_report(found))
    return _download(found, body, "text/csv; charset=utf-8", "csv")


@earnings_view
def statement_json(request: HttpRequest, statement_id: Any) -> HttpResponseBase:
    found = statement_for_user(user=the_user(request), statement_id=statement_id)
    return _download(found, render_json(statement_report(found)), "application/json", "json")

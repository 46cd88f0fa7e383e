"""How a report's figures read, shared by the PDF and the portal's statement pages."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal

from billing.reports import charts
from billing.reports.report import Report

DASH = "-"

# The basis of every figure, as the PDF and the statement page state it.
FIGURE_NOTES: tuple[tuple[str, str], ...] = (
    (
        "Service hours",
        "seconds the GPU was in service and yours on this line; each is up, down, "
        "maintenance or no data (in that order of precedence)",
    ),
    ("Availability", "up / (in service - maintenance); no data counts against it"),
    ("Utilization", "time-weighted mean GPU utilization over up time"),
    ("Energy", "kWh from the GPU's energy counter over the line (resets handled)"),
    (
        "Gross",
        "your share of the revenue the GPU earned (rentals at their rate per GPU-hour of up "
        "time, and your GPU's part of the cluster's pool), before costs",
    ),
    ("Hosting fee", "fee per GPU-month of the rate card, pro-rated by owned in-service time"),
    ("Power cost", "measured energy x PUE x price per kWh x your share"),
    ("Management fee", "the rate card's percentage of gross"),
    ("Net", "gross minus hosting fee, power cost and management fee; it can be negative"),
    (
        "Balance",
        "balance carried from the previous statement + net of the lines + adjustments - "
        "payouts; a negative balance carries forward",
    ),
    ("Money", "exact decimals rounded once to the cent, half-even, per line"),
)


def amount(value: Decimal, currency: str) -> str:
    return f"{value:,.2f} {currency}"


def pct(value: Decimal | None) -> str:
    if value is None:
        return DASH
    return f"{(value * 100).quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN)} %"


def hours(seconds: int) -> str:
    return f"{(Decimal(seconds) / 3600).quantize(Decimal('0.1'), rounding=ROUND_HALF_EVEN)}"


def when(at: datetime | None, *, short: bool = False) -> str:
    if at is None:
        return DASH
    at = at.astimezone(UTC)
    return f"{at:%Y-%m-%d %H:%M}" if short else f"{at:%Y-%m-%d %H:%M} UTC"


def status_line(report: Report) -> str:
    if report.final:
        return (
            f"Final statement for {report.period_label}, published "
            f"{when(report.published_at)}; it does not change."
        )
    return (
        f"PRELIMINARY - a draft for {report.period_label}, computed "
        f"{when(report.computed_at)}: its figures can change until it is published."
    )


def event_rows(report: Report) -> list[list[str]]:
    return [
        [
            e.kind.capitalize(),
            e.title,
            e.cause.replace("_", " ") if e.cause else DASH,
            when(e.starts_at, short=True),
            when(e.ends_at, short=True) if e.ends_at else "open",
            ", ".join(e.gpus),
        ]
        for e in report.events or ()
    ]


def availability_bars(report: Report, *, id_prefix: str = "avail") -> str:
    days = report.days or ()
    return charts.daily_bars_svg(
        [charts.Bar(d.day, None if d.availability is None else d.availability * 100) for d in days],
        title=f"Availability by day, {report.period_label} (%)",
        desc=f"Availability of your GPUs on this statement, one bar per UTC day for "
        f"{report.period_label}; the table of days lists the same figures.",
        unit="%",
        id_prefix=id_prefix,
        y_max=Decimal(100),
        colour="#2e7d32",
    )


def utilization_bars(report: Report, *, id_prefix: str = "util") -> str:
    days = report.days or ()
    return charts.daily_bars_svg(
        [charts.Bar(d.day, None if d.utilization is None else d.utilization * 100) for d in days],
        title=f"Utilization by day, {report.period_label} (%)",
        desc=f"Mean utilization over up time of your GPUs on this statement, one bar per UTC "
        f"day for {report.period_label}; the table of days lists the same figures.",
        unit="%",
        id_prefix=id_prefix,
        y_max=Decimal(100),
    )

"""How a report's figures read, shared by the PDF and the portal's statement pages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

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


def _num(text: str | int | Decimal) -> str:
    """A figure of the terms as a person reads it: thousands separated, no trailing zeros
    (the value is exact; the JSON and CSV keep the digits as stored)."""
    value = Decimal(text)
    if value == value.to_integral_value():
        return f"{value.quantize(Decimal(1)):,}"
    return f"{value.normalize():,f}"


def _at(text: str) -> str:
    return when(parse(text), short=True)


@dataclass(frozen=True)
class Place:
    """Where and when a GPU line is, as the tables show it."""

    label: str  # "GPU SN-1", or "GPU SN-1 (cluster A)" for a GPU that changed clusters
    starts_at: datetime
    ends_at: datetime


def line_places(report: Report) -> dict[int, Place]:
    """Per GPU line (by position): a GPU that changed clusters within the period has a line
    per cluster, each covering the owner's whole run; its lines are named by their cluster
    and show the span the GPU was there (their terms), so they do not look alike. Every other
    line shows its run as stored."""
    clusters: dict[str, set[str]] = {}
    for line, terms in zip(report.lines, report.terms, strict=True):
        if terms is not None:
            clusters.setdefault(str(line["gpu_id"]), set()).add(terms["cluster_id"])
    places = {}
    for line, terms in zip(report.lines, report.terms, strict=True):
        if line["kind"] != "gpu":
            continue
        if terms is not None and len(clusters[str(line["gpu_id"])]) > 1:
            cluster = terms["cluster_name"] or terms["cluster_id"]
            places[line["position"]] = Place(
                f"{line['description']} (cluster {cluster})",
                parse(terms["span"][0]),
                parse(terms["span"][1]),
            )
        else:
            places[line["position"]] = Place(
                line["description"], line["starts_at"], line["ends_at"]
            )
    return places


def terms_parts(terms: dict[str, Any], currency: str) -> list[str]:
    """A line's terms as short phrases (the portal joins them; the PDF wraps them): each
    figure of the line can be recomputed from these by hand (docs/accounting.md)."""
    share = terms["share"]
    pool = terms["pool"]
    revenue = terms["revenue"]
    # The name as issued when the statement froze it; else the cluster's id, which the
    # JSON export and the API name it by.
    cluster = terms["cluster_name"] or terms["cluster_id"]
    parts = [
        f"cluster {cluster}, {_at(terms['span'][0])} to {_at(terms['span'][1])} UTC",
        f"up {_num(terms['up_s'])} s",
        f"your share {_num(Decimal(share['bps']) / 100)} % from {_at(share['from'])} to "
        f"{_at(share['to'])}",
    ]
    for rental in terms["rentals"]:
        parts.append(
            f"rental {_num(rental['rate_per_gpu_hour'])} {currency}/GPU-hour x "
            f"{_num(rental['up_s'])} up s / 3600 = {_num(rental['amount'])}"
        )
    unit = "up s" if pool["basis"] == "up_seconds" else "busy s"
    total = (
        f" of {_num(pool['total_weight'])} in the cluster's {_num(pool['cluster_amount'])} "
        f"{currency} pool"
        if pool["total_weight"] is not None and pool["cluster_amount"] is not None
        else ""
    )
    parts.append(
        f"pool part {pool['gpu_part']} {currency}, split by {unit}: this GPU "
        f"{_num(pool['gpu_weight'])}{total}; this line {_num(pool['run_weight'])}"
    )
    parts.append(
        f"GPU revenue {revenue['gpu_total']} {currency} (rentals {revenue['gpu_rentals']}); "
        f"this line's {_num(revenue['run_exact'])} x share = {_num(revenue['share_exact'])}"
    )
    for card in terms["rate_cards"]:
        waived = f" - {_num(card['waived_incident_s'])} waived" if card["waived_incident_s"] else ""
        if card["waived_down_s"]:
            waived += f" - {_num(card['waived_down_s'])} down, waived"
        parts += [
            f"rate card {_at(card['from'])} to {_at(card['to'])}: hosting "
            f"{_num(card['hosting_fee_per_gpu_month'])} {currency}/month x "
            f"({_num(card['in_service_s'])} s in service{waived}) x share / "
            f"{_num(card['period_s'])} s",
            f"power {_num(card['energy_kwh'])} kWh x PUE {_num(card['pue'])} x "
            f"{_num(card['price_per_kwh'])} {currency}/kWh x share",
            f"management {_num(card['management_fee_pct'])} % of gross",
        ]
    return parts


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)

"""The portal's charts: drawn in the billing layer (``billing.reports.charts``) so that the
statement PDF embeds exactly the SVG the pages show; and the earnings page's chart of money
per period (``period_money_svg``), which no PDF draws."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from html import escape

from billing.reports.charts import (
    HOUR,
    STATE_STYLE,
    Bar,
    Point,
    Run,
    daily_bars_svg,
    line_chart_svg,
    nice_ceiling,
    runs,
    timeline_svg,
)

__all__ = [
    "HOUR",
    "MONEY_SERIES",
    "STATE_STYLE",
    "Bar",
    "PeriodMoney",
    "Point",
    "Run",
    "daily_bars_svg",
    "line_chart_svg",
    "nice_ceiling",
    "period_money_svg",
    "runs",
    "timeline_svg",
]


def _n(value: Decimal) -> str:
    """A coordinate with one decimal at most (as ``billing.reports.charts`` writes them)."""
    text = f"{value.quantize(Decimal('0.1')):f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class PeriodMoney:
    """One period's money in one currency: gross, the three costs together, and net."""

    label: str  # e.g. "Oct 2026"
    gross: Decimal
    costs: Decimal
    net: Decimal


# Gross, costs and net: colours that reach 3:1 against white, told apart by the legend too.
MONEY_SERIES: tuple[tuple[str, str, str], ...] = (
    ("gross", "Gross", "#1f4e8c"),
    ("costs", "Costs (hosting, power, management)", "#b3261e"),
    ("net", "Net", "#2e7d32"),
)


def period_money_svg(
    periods: Sequence[PeriodMoney],
    *,
    title: str,
    desc: str,
    currency: str,
    id_prefix: str,
    x_title: str = "",
) -> str:
    """Three bars per period (gross, costs, net), a zero line (a net can be negative), the
    amount axis in whole units of ``currency`` and a period under each group; ``x_title``
    names that axis under it (the days of a month: "Day of March 2026 (UTC)"). Pure: the
    same input gives the same bytes."""
    width, height = 760, 240 + (16 if x_title else 0)
    left, right, top, bottom = 72, 12, 28, 28 + (16 if x_title else 0)
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for p in periods for v in (p.gross, p.costs, p.net)] or [Decimal(0)]
    high = nice_ceiling(max(max(values), Decimal(0))) or Decimal(1)
    low = -nice_ceiling(-min(values)) if min(values) < 0 else Decimal(0)
    span = high - low

    def y_of(value: Decimal) -> Decimal:
        return top + plot_h * (high - value) / span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart money" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="{id_prefix}-title {id_prefix}-desc" '
        f'preserveAspectRatio="xMidYMid meet" font-family="system-ui, sans-serif" font-size="11">',
        f'<title id="{id_prefix}-title">{escape(title)}</title>',
        f'<desc id="{id_prefix}-desc">{escape(desc)}</desc>',
    ]
    for step in range(5):
        value = low + span * step / 4
        y = y_of(value)
        parts.append(
            f'<line x1="{left}" y1="{_n(y)}" x2="{width - right}" y2="{_n(y)}" '
            f'stroke="#d5dbe3"/><text x="{left - 6}" y="{_n(y + 4)}" text-anchor="end" '
            f'fill="#1b2430">{value.quantize(Decimal(1)):,} {escape(currency)}</text>'
        )
    slot = Decimal(plot_w) / max(len(periods), 1)
    bar_w = slot * 3 / 14
    zero = y_of(Decimal(0))
    for index, period in enumerate(periods):
        x = left + slot * index + slot / 8
        for n, (name, label, colour) in enumerate(MONEY_SERIES):
            amount: Decimal = getattr(period, name)
            y = y_of(max(amount, Decimal(0)))
            h = abs(y_of(amount) - zero)
            parts.append(
                f'<rect x="{_n(x + bar_w * n)}" y="{_n(y)}" width="{_n(bar_w)}" '
                f'height="{_n(h)}" fill="{colour}"><title>{escape(period.label)}, '
                f"{escape(label)}: {amount:,.2f} {escape(currency)}</title></rect>"
            )
        parts.append(
            f'<text x="{_n(left + slot * index + slot / 2)}" y="{top + plot_h + 20}" '
            f'text-anchor="middle" fill="#1b2430">{escape(period.label)}</text>'
        )
    if x_title:
        parts.append(
            f'<text x="{left + plot_w // 2}" y="{height - 6}" text-anchor="middle" '
            f'fill="#1b2430">{escape(x_title)}</text>'
        )
    parts.append(
        f'<line x1="{left}" y1="{_n(zero)}" x2="{width - right}" y2="{_n(zero)}" stroke="#1b2430"/>'
    )
    x = Decimal(left)
    for _, label, colour in MONEY_SERIES:
        parts.append(
            f'<rect x="{_n(x)}" y="8" width="10" height="10" fill="{colour}"/>'
            f'<text x="{_n(x + 14)}" y="17" fill="#1b2430">{escape(label)}</text>'
        )
        x += 14 + 7 * len(label)
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        f'stroke="#5a6675"/>'
    )
    parts.append("</svg>")
    return "".join(parts)

"""SVG charts drawn once, on the server: the uptime strip, line/area charts and daily bars.

Pure functions of their input (no clock, no randomness, no Django): the same input gives the
same bytes, so the portal's pages and the statement PDF embed the very same drawing, and tests
can rely on them. They live in the billing layer because the PDF report (billing) draws them
too; ``portal.charts`` is the portal's import point. Charts meant for the PDF keep to what
fpdf2's SVG reader draws: ``rect``, ``line``, ``polyline``, ``polygon``, ``circle`` and plain
``text`` with solid fills (no patterns; ``title``/``desc`` are dropped there). Every chart is
an ``<svg role="img">`` with a ``<title>`` and ``<desc>`` wired up by ``aria-labelledby``; the
page shows the same figures in a table. Numbers are written with fixed decimals;
``id_prefix`` keeps the ids unique when several charts share a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from html import escape

# Colours reach 3:1 or more against white (WCAG 1.4.11); no-data is also hatched.
STATE_STYLE: dict[str, tuple[str, str]] = {
    "up": ("#2e7d32", "Up"),
    "down": ("#b3261e", "Down"),
    "maintenance": ("#1f4e8c", "Maintenance"),
    "no_data": ("#6b7280", "No data"),
    "not_counted": ("#e5e7eb", "Not counted (not yours, or not in service)"),
}
HOUR = timedelta(hours=1)


def _n(value: float | Decimal) -> str:
    """A coordinate with at most one decimal, no trailing zeros: stable text for equal input."""
    text = f"{Decimal(value).quantize(Decimal('0.1')):f}"
    return text[:-2] if text.endswith(".0") else text


def _t(at: datetime) -> str:
    return f"{at:%d %b %H:%M}"


def _head(
    *, id_prefix: str, width: int, height: int, title: str, desc: str, css_class: str
) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="{id_prefix}-title {id_prefix}-desc" '
        f'preserveAspectRatio="xMidYMid meet" font-family="system-ui, sans-serif" '
        f'font-size="11">',
        f'<title id="{id_prefix}-title">{escape(title)}</title>',
        f'<desc id="{id_prefix}-desc">{escape(desc)}</desc>',
    ]


@dataclass(frozen=True)
class Run:
    start: datetime
    hours: int
    state: str


def runs(states: Sequence[tuple[datetime, str]]) -> list[Run]:
    """Consecutive hours in one state merged into runs."""
    out: list[Run] = []
    for start, state in states:
        if out and out[-1].state == state and out[-1].start + out[-1].hours * HOUR == start:
            out[-1] = Run(out[-1].start, out[-1].hours + 1, state)
        else:
            out.append(Run(start, 1, state))
    return out


def timeline_svg(
    states: Sequence[tuple[datetime, str]], *, title: str, desc: str, id_prefix: str
) -> str:
    """One cell per hour, coloured by its state; a tick and date every 7 days (UTC)."""
    cell, left, top, bar = 2, 4, 4, 36
    width = left * 2 + cell * max(len(states), 1)
    height = top + bar + 20
    hatch = f"{id_prefix}-hatch"
    parts = _head(
        id_prefix=id_prefix,
        width=width,
        height=height,
        title=title,
        desc=desc,
        css_class="chart timeline",
    )
    parts.append(
        f'<defs><pattern id="{hatch}" width="4" height="4" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="4" height="4" '
        f'fill="{STATE_STYLE["no_data"][0]}"/><rect width="2" height="4" fill="#ffffff" '
        f'fill-opacity="0.45"/></pattern></defs>'
    )
    first = states[0][0] if states else None
    for run in runs(states):
        x = left + cell * int((run.start - first).total_seconds() // 3600) if first else left
        colour, label = STATE_STYLE.get(run.state, STATE_STYLE["not_counted"])
        fill = f"url(#{hatch})" if run.state == "no_data" else colour
        end = run.start + run.hours * HOUR
        parts.append(
            f'<rect x="{x}" y="{top}" width="{cell * run.hours}" height="{bar}" fill="{fill}">'
            f"<title>{escape(label)}: {_t(run.start)} – {_t(end)} UTC</title></rect>"
        )
    for index, (start, _) in enumerate(states):
        if start.hour == 0 and start.weekday() == 0:
            x = left + cell * index
            parts.append(
                f'<line x1="{x}" y1="{top}" x2="{x}" y2="{top + bar + 4}" stroke="#1b2430"/>'
                f'<text x="{x}" y="{height - 2}" fill="#1b2430">{start:%d %b}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def nice_ceiling(value: Decimal) -> Decimal:
    """1, 2, 2.5 or 5 times a power of ten, at least ``value`` (the y axis' top)."""
    if value <= 0:
        return Decimal(1)
    exponent = value.adjusted()
    for step in (Decimal(1), Decimal(2), Decimal("2.5"), Decimal(5), Decimal(10)):
        top = step.scaleb(exponent)
        if top >= value:
            return top.normalize() if top == top.to_integral() else top
    return Decimal(10).scaleb(exponent)  # pragma: no cover - the loop always returns


@dataclass(frozen=True)
class Point:
    at: datetime  # start of the hour
    value: Decimal | None


def line_chart_svg(
    points: Sequence[Point],
    *,
    start: datetime,
    end: datetime,
    title: str,
    desc: str,
    unit: str,
    id_prefix: str,
    y_max: Decimal | None = None,
    area: bool = False,
    colour: str = "#1f4e8c",
) -> str:
    """Hourly values drawn at the middle of their hour; a missing hour breaks the line."""
    width, height = 760, 200
    left, right, top, bottom = 48, 12, 10, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [p.value for p in points if p.value is not None]
    top_value = y_max or nice_ceiling(max(values, default=Decimal(0)))
    span = Decimal(max(int((end - start).total_seconds()), 1))

    def x_of(at: datetime) -> Decimal:
        middle = Decimal(int((at - start).total_seconds()) + 1800)
        return left + plot_w * min(middle, span) / span

    def y_of(value: Decimal) -> Decimal:
        clipped = max(Decimal(0), min(value, top_value))
        return top + plot_h - plot_h * clipped / top_value

    parts = _head(
        id_prefix=id_prefix,
        width=width,
        height=height,
        title=title,
        desc=desc,
        css_class="chart line",
    )
    for step in range(5):
        value = top_value * step / 4
        y = y_of(value)
        parts.append(
            f'<line x1="{left}" y1="{_n(y)}" x2="{width - right}" y2="{_n(y)}" '
            f'stroke="#d5dbe3"/><text x="{left - 6}" y="{_n(y + 4)}" text-anchor="end" '
            f'fill="#1b2430">{_n(value)}{escape(unit)}</text>'
        )
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day < end:
        if day >= start and day.weekday() == 0:
            x = left + plot_w * Decimal(int((day - start).total_seconds())) / span
            parts.append(
                f'<line x1="{_n(x)}" y1="{top}" x2="{_n(x)}" y2="{top + plot_h}" '
                f'stroke="#d5dbe3"/><text x="{_n(x)}" y="{height - 6}" text-anchor="middle" '
                f'fill="#1b2430">{day:%d %b}</text>'
            )
        day += timedelta(days=1)
    for segment in _segments(points):
        coords = [(x_of(p.at), y_of(p.value)) for p in segment if p.value is not None]
        line = " ".join(f"{_n(x)},{_n(y)}" for x, y in coords)
        if area:
            base = _n(top + plot_h)
            parts.append(
                f'<polygon points="{_n(coords[0][0])},{base} {line} '
                f'{_n(coords[-1][0])},{base}" fill="{colour}" fill-opacity="0.18"/>'
            )
        if len(coords) == 1:
            x, y = coords[0]
            parts.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="2" fill="{colour}"/>')
        else:
            parts.append(
                f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        f'stroke="#5a6675"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _segments(points: Sequence[Point]) -> list[list[Point]]:
    """Runs of consecutive hours that have a value."""
    out: list[list[Point]] = []
    previous: Point | None = None
    for point in points:
        if point.value is None:
            previous = None
            continue
        if previous is not None and point.at - previous.at == HOUR and out:
            out[-1].append(point)
        else:
            out.append([point])
        previous = point
    return out


@dataclass(frozen=True)
class Bar:
    day: datetime  # start of the UTC day
    value: Decimal | None  # None: nothing to measure that day (drawn as a gap)


def daily_bars_svg(
    bars: Sequence[Bar],
    *,
    title: str,
    desc: str,
    unit: str,
    id_prefix: str,
    y_max: Decimal,
    colour: str = "#1f4e8c",
) -> str:
    """One bar per UTC day; a day without a value is a gap. A date label every 7 days."""
    width, height = 760, 180
    left, right, top, bottom = 48, 12, 10, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = Decimal(plot_w) / max(len(bars), 1)
    parts = _head(
        id_prefix=id_prefix,
        width=width,
        height=height,
        title=title,
        desc=desc,
        css_class="chart bars",
    )
    for step in range(5):
        value = y_max * step / 4
        y = top + plot_h - plot_h * value / y_max
        parts.append(
            f'<line x1="{left}" y1="{_n(y)}" x2="{width - right}" y2="{_n(y)}" '
            f'stroke="#d5dbe3"/><text x="{left - 6}" y="{_n(y + 4)}" text-anchor="end" '
            f'fill="#1b2430">{_n(value)}{escape(unit)}</text>'
        )
    for index, bar in enumerate(bars):
        x = left + slot * index
        if bar.value is not None:
            clipped = max(Decimal(0), min(bar.value, y_max))
            h = plot_h * clipped / y_max
            parts.append(
                f'<rect x="{_n(x + slot / 8)}" y="{_n(top + plot_h - h)}" '
                f'width="{_n(slot * 3 / 4)}" height="{_n(h)}" fill="{colour}"/>'
            )
        if index % 7 == 0:
            parts.append(
                f'<text x="{_n(x + slot / 2)}" y="{height - 6}" text-anchor="middle" '
                f'fill="#1b2430">{bar.day:%d %b}</text>'
            )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        f'stroke="#5a6675"/>'
    )
    parts.append("</svg>")
    return "".join(parts)

"""The portal's charts: drawn in the billing layer (``billing.reports.charts``) so that the
statement PDF embeds exactly the SVG the pages show."""

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
    "STATE_STYLE",
    "Bar",
    "Point",
    "Run",
    "daily_bars_svg",
    "line_chart_svg",
    "nice_ceiling",
    "runs",
    "timeline_svg",
]

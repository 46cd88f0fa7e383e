"""Charts are pure: the same input gives the same bytes (checked against stored files)."""

from __future__ import annotations

import datetime as dt
import os
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

from portal import charts

GOLDEN = Path(__file__).parent / "golden"
START = dt.datetime(2026, 11, 2, 0, tzinfo=dt.UTC)  # a Monday
HOUR = dt.timedelta(hours=1)
NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own output, not untrusted input


def child(element: ET.Element, tag: str) -> ET.Element:
    found = element.find(f"{NS}{tag}")
    assert found is not None, tag
    return found


def sample_states():
    states = []
    for n in range(14 * 24):
        at = START + n * HOUR
        state = "up"
        if 30 <= n < 33:
            state = "down"
        elif 50 <= n < 52:
            state = "maintenance"
        elif 100 <= n < 110:
            state = "no_data"
        elif n >= 300:
            state = "not_counted"
        states.append((at, state))
    return states


def sample_points():
    points = []
    for n in range(14 * 24):
        value = None if 100 <= n < 110 else Decimal(n % 24) * Decimal("3.7") + Decimal("0.25")
        points.append(charts.Point(START + n * HOUR, value))
    return points


def timeline():
    return charts.timeline_svg(
        sample_states(), title="Uptime <GPU A1>", desc="Two weeks & a bit.", id_prefix="t"
    )


def line():
    return charts.line_chart_svg(
        sample_points(),
        start=START,
        end=START + 14 * 24 * HOUR,
        title="Utilization",
        desc="Hourly mean.",
        unit="%",
        id_prefix="u",
        area=True,
    )


def check_golden(name: str, svg: str) -> None:
    """A deliberate change to the drawing: run with STEWARD_UPDATE_GOLDEN=1, review, commit."""
    path = GOLDEN / name
    if os.environ.get("STEWARD_UPDATE_GOLDEN") == "1":
        path.write_text(svg, encoding="utf-8")
    assert svg == path.read_text(encoding="utf-8")


def test_the_timeline_is_byte_for_byte_stable():
    first, second = timeline(), timeline()
    assert first == second
    check_golden("timeline.svg", first)


def test_the_line_chart_is_byte_for_byte_stable():
    assert line() == line()
    check_golden("line.svg", line())


def test_charts_are_labelled_images_with_escaped_text():
    for svg, prefix in [(timeline(), "t"), (line(), "u")]:
        root = parse(svg)
        assert root.get("role") == "img"
        assert root.get("aria-labelledby") == f"{prefix}-title {prefix}-desc"
        assert child(root, "title").get("id") == f"{prefix}-title"
        assert child(root, "desc").get("id") == f"{prefix}-desc"
    assert child(parse(timeline()), "title").text == "Uptime <GPU A1>"


def test_the_timeline_merges_hours_into_runs():
    root = parse(timeline())
    rects = [r for r in root.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    labels = [child(r, "title").text for r in rects]
    assert labels[:3] == [
        "Up: 02 Nov 00:00 – 03 Nov 06:00 UTC",
        "Down: 03 Nov 06:00 – 03 Nov 09:00 UTC",
        "Up: 03 Nov 09:00 – 04 Nov 02:00 UTC",
    ]
    assert (
        labels[-1] == "Not counted (not yours, or not in service): 14 Nov 12:00 – 16 Nov 00:00 UTC"
    )
    assert [r.get("width") for r in rects[:2]] == ["60", "6"]


def test_a_gap_breaks_the_line_and_the_axis_is_rounded_up():
    root = parse(line())
    assert len(list(root.iter(f"{NS}polyline"))) == 2
    assert charts.nice_ceiling(Decimal("85.35")) == Decimal(100)
    assert charts.nice_ceiling(Decimal("701")) == Decimal(1000)
    assert charts.nice_ceiling(Decimal("130")) == Decimal(200)
    assert charts.nice_ceiling(Decimal("0")) == Decimal(1)
    labels = [t.text for t in root.iter(f"{NS}text")]
    assert labels[:5] == ["0%", "25%", "50%", "75%", "100%"]


def test_empty_input_draws_an_empty_chart():
    svg = charts.line_chart_svg(
        [], start=START, end=START + HOUR, title="t", desc="d", unit=" W", id_prefix="e"
    )
    assert "<polyline" not in svg and parse(svg) is not None
    assert (
        "<rect"
        not in charts.timeline_svg([], title="t", desc="d", id_prefix="z").split("</defs>")[1]
    )

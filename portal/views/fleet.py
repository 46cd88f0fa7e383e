"""Fleet overview, the GPU list and a GPU's page."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponseBase
from django.urls import reverse
from django.utils.safestring import mark_safe

from accounts.models import Owner
from portal import charts, selectors
from portal.access import (
    gpu_for_user,
    incidents_for_user,
    maintenance_for_user,
    owners_of_user,
)
from portal.forms import GpuFilterForm, PeriodForm
from portal.health import EVENTS_SHOWN, GpuHealth, gpu_health
from portal.tables import (
    Column,
    Table,
    fmt_bps,
    fmt_decimal,
    fmt_hours,
    fmt_pct,
    fmt_second,
    fmt_when,
)
from portal.views import money
from portal.views.common import (
    disclosure_is_acknowledged,
    now,
    owner_view,
    period_choices,
    period_of,
    table_page,
    the_user,
)
from portal.views.events import incident_table, maintenance_table
from telemetry.models import GpuState

PAGE_SIZE = 25


def _count_table(name: str, caption: str, rows: list[tuple[str, int]]) -> Table:
    return Table(
        name=name,
        caption=caption,
        columns=[
            Column("State", lambda r: r[0]),
            Column("GPUs", lambda r: r[1], numeric=True),
        ],
        rows=rows,
        empty="No GPUs.",
    )


@owner_view
def overview(request: HttpRequest) -> HttpResponseBase:
    user, at = the_user(request), now()
    period = period_of(request, at)
    data = selectors.fleet_overview(user=user, period=period, now=at)
    tables = [
        _count_table("lifecycle", "GPUs you hold now, by lifecycle state", data.by_lifecycle),
        _count_table("telemetry", "GPUs you hold now, by what telemetry says", data.by_telemetry),
        incident_table(data.open_incidents, caption="Open incidents affecting your GPUs"),
        maintenance_table(data.upcoming_maintenance, caption="Upcoming maintenance"),
    ]
    owners: list[Owner] = list(owners_of_user(user=user))
    # Earnings only behind the acknowledged disclosure (the rule of ``earnings_view``); the
    # rest of the page is for every owner.
    earnings_shown = bool(owners) and disclosure_is_acknowledged(user)
    context = {
        "owners": owners,
        "data": data,
        "period_form": PeriodForm({"period": period.key}, periods=period_choices(at)),
        "figures": _figure_cards(data.figures),
        "earnings_shown": earnings_shown,
        "earnings": money.earnings_blocks(
            owners=owners,
            periods=money.overview_periods(running=selectors.month_period(now=at), selected=period),
            at=at,
        )
        if earnings_shown
        else [],
    }
    return table_page(request, "portal/overview.html", context, tables)


def _figure_cards(figures: Any) -> list[tuple[str, str, str]]:
    return [
        ("Availability", fmt_pct(figures.availability), "up ÷ (in service − maintenance)"),
        ("Utilization", fmt_pct(figures.utilization), "mean over up time"),
        ("Hours up", fmt_hours(figures.up_s), ""),
        ("Hours down", fmt_hours(figures.down_s), "telemetry down or an incident"),
        ("Hours in maintenance", fmt_hours(figures.maintenance_s), "planned"),
        ("Hours with no data", fmt_hours(figures.no_data_s), "agent silent; not the same as down"),
        ("Energy", f"{fmt_decimal(figures.energy_kwh, 3)} kWh", "from the energy counter"),
    ]


def gpu_table(rows: Any, *, export_rows: Any = None, caption: str) -> Table:
    return Table(
        name="gpus",
        caption=caption,
        columns=[
            Column(
                "Serial",
                lambda r: r.gpu.serial,
                link=lambda r: reverse("portal:gpu", args=[r.gpu.pk]),
            ),
            Column("Model", lambda r: r.gpu.model.name),
            Column("Cluster", lambda r: r.cluster),
            Column("Node", lambda r: r.node),
            Column("Slot", lambda r: r.slot, numeric=True),
            Column(
                "Lifecycle",
                lambda r: r.gpu.lifecycle_state,
                text=lambda r: r.gpu.get_lifecycle_state_display(),
                badge=True,
            ),
            Column(
                "Telemetry now",
                lambda r: r.telemetry,
                text=lambda r: GpuState(r.telemetry).label,
                badge=True,
            ),
            Column(
                "Telemetry last seen",
                lambda r: r.last_seen,
                text=lambda r: fmt_second(r.last_seen) if r.last_seen else "never",
                csv_label="telemetry_last_seen",
            ),
            Column(
                "Your share now",
                lambda r: r.share_bps,
                text=lambda r: fmt_bps(r.share_bps),
                numeric=True,
                csv_label="your_share_bps",
            ),
            Column(
                "Availability",
                lambda r: _q(r.figures.availability),
                text=lambda r: fmt_pct(r.figures.availability),
                numeric=True,
            ),
            Column(
                "Utilization",
                lambda r: _q(r.figures.utilization),
                text=lambda r: fmt_pct(r.figures.utilization),
                numeric=True,
            ),
            Column(
                "Hours no data",
                lambda r: fmt_hours(r.figures.no_data_s),
                numeric=True,
            ),
            Column(
                "Energy (kWh)",
                lambda r: r.figures.energy_kwh,
                text=lambda r: fmt_decimal(r.figures.energy_kwh, 3),
                numeric=True,
                csv_label="energy_kwh",
            ),
        ],
        rows=rows,
        export_rows=export_rows,
        empty="No GPUs match these filters.",
    )


def _q(value: Any) -> str | None:
    return None if value is None else fmt_decimal(value, 6)


@owner_view
def gpu_list(request: HttpRequest) -> HttpResponseBase:
    user, at = the_user(request), now()
    models = [(str(m.pk), m.name) for m in selectors.model_choices(user=user)]
    form = GpuFilterForm(
        request.GET or None,
        clusters=selectors.cluster_choices(user=user, now=at),
        models=models,
        periods=period_choices(at),
    )
    filters = selectors.GpuFilters(
        lifecycle=form.value("lifecycle"),
        telemetry=form.value("telemetry"),
        cluster=form.value("cluster"),
        model=form.value("model"),
        held=form.value("held", "now"),
        sort=form.value("sort", "serial"),
    )
    period = period_of(request, at)
    rows = selectors.gpu_rows(user=user, filters=filters, period=period, now=at)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    table = gpu_table(
        page.object_list,
        export_rows=rows,
        caption=f"Your GPUs — availability and utilization for {period.label}",
    )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "period": period,
        "filters": filters,
        "query": query.urlencode(),
        "sort_links": _sort_links(request, filters.sort),
        "count": len(rows),
    }
    return table_page(request, "portal/gpu_list.html", context, [table])


def _sort_links(request: HttpRequest, current: str) -> dict[str, dict[str, str]]:
    links = {}
    for key in selectors.SORTS:
        query = request.GET.copy()
        query.pop("page", None)
        descending = current == key
        query["sort"] = f"-{key}" if descending else key
        state = "none"
        if current == key:
            state = "ascending"
        elif current == f"-{key}":
            state = "descending"
        links[key] = {"href": f"?{query.urlencode()}", "aria": state}
    return links


@owner_view
def gpu_page(request: HttpRequest, gpu_id: Any) -> HttpResponseBase:
    user, at = the_user(request), now()
    gpu = gpu_for_user(user=user, gpu_id=gpu_id)
    detail = selectors.gpu_detail(user=user, gpu=gpu, now=at)
    history = selectors.gpu_placements(gpu=gpu)
    health = gpu_health(
        user=user, gpu=gpu, start=detail.window.start, end=detail.window.end, now=at
    )
    tables = [
        _days_table(detail),
        _hours_table(detail),
        *_health_tables(health),
        Table(
            name="placements",
            caption="Placement history",
            columns=[
                Column("Site", lambda p: p.node.cluster.site.name),
                Column("Cluster", lambda p: str(p.node.cluster)),
                Column("Node", lambda p: p.node.hostname),
                Column("Slot", lambda p: p.slot, numeric=True),
                Column("From", lambda p: p.valid_from, text=lambda p: fmt_when(p.valid_from)),
                Column(
                    "Until",
                    lambda p: p.valid_to,
                    text=lambda p: fmt_when(p.valid_to) if p.valid_to else "now",
                ),
            ],
            rows=history,
            empty="This GPU has not been placed in a node.",
        ),
        Table(
            name="ownership",
            caption="Ownership history (shares in percent of the GPU)",
            columns=[
                Column("Owner", lambda o: o["owner"]),
                Column(
                    "Share",
                    lambda o: o["share_bps"],
                    text=lambda o: fmt_bps(o["share_bps"]),
                    numeric=True,
                    csv_label="share_bps",
                ),
                Column("From", lambda o: o["valid_from"], text=lambda o: fmt_when(o["valid_from"])),
                Column(
                    "Until",
                    lambda o: o["valid_to"],
                    text=lambda o: fmt_when(o["valid_to"]) if o["valid_to"] else "now",
                ),
            ],
            rows=selectors.ownership_history(user=user, gpu=gpu),
        ),
        incident_table(
            list(incidents_for_user(user=user, gpu=gpu).order_by("-started_at")),
            caption="Incidents that affected this GPU while you held it",
        ),
        maintenance_table(
            list(maintenance_for_user(user=user, gpu=gpu).order_by("-starts_at")),
            caption="Maintenance covering this GPU while you hold it",
        ),
    ]
    # No telemetry ever: say so instead of a strip of no-data hours and empty charts. Telemetry,
    # but none in the 30 days: the strip shows that; charts with no point are left out.
    telemetry_ever = detail.last_seen is not None
    charted = any(
        m.utilization is not None or m.power_w is not None or m.temp_max_c is not None
        for m in detail.metrics
    )
    context = {
        "gpu": gpu,
        "detail": detail,
        "health": health,
        "reading": _reading_facts(health),
        "telemetry_ever": telemetry_ever,
        "charted": charted,
        "placement": history[-1] if history and history[-1].valid_to is None else None,
        "figures": _figure_cards(detail.figures),
        "timeline": mark_safe(_timeline(detail)) if telemetry_ever else "",  # noqa: S308 - built by portal.charts, escaped
        "charts": [mark_safe(svg) for svg in _charts(detail)] if charted else [],  # noqa: S308 - as above
        "legend": [(key, label, colour) for key, (colour, label) in charts.STATE_STYLE.items()],
        "share": fmt_bps(detail.share_bps),
        "telemetry_label": GpuState(detail.telemetry).label,
        "telemetry_since": fmt_second(detail.telemetry_since) if detail.telemetry_since else "",
        "last_seen": fmt_second(detail.last_seen) if detail.last_seen else "never",
    }
    return table_page(request, "portal/gpu.html", context, tables)


def _count(value: int | None) -> str:
    return "not reported" if value is None else f"{value:,}"


def _reading_facts(health: GpuHealth) -> list[tuple[str, str]]:
    """The newest reading's counters as the page lists them."""
    r = health.reading
    if r is None:
        return []
    pending = {None: "not reported", True: "yes: takes effect at the next reset", False: "no"}
    return [
        ("Reading of", fmt_second(r.at)),
        ("Node", r.node),
        ("ECC errors, corrected (driver counter)", _count(r.ecc_corrected)),
        ("ECC errors, uncorrected (driver counter)", _count(r.ecc_uncorrected)),
        ("Remapped rows, correctable errors", _count(r.remapped_correctable)),
        ("Remapped rows, uncorrectable errors", _count(r.remapped_uncorrectable)),
        ("Row remap pending", pending[r.remapped_pending]),
        ("Retired pages", _count(r.retired_pages)),
        ("PCIe replays", _count(r.pcie_replays)),
        (
            "Temperature, minute's maximum",
            "not reported" if r.temp_max_c is None else f"{fmt_decimal(r.temp_max_c, 1)} °C",
        ),
        (
            "Power, minute's mean",
            "not reported" if r.power_avg_w is None else f"{fmt_decimal(r.power_avg_w, 1)} W",
        ),
    ]


def _health_tables(health: GpuHealth) -> list[Table]:
    def remap(value: Any) -> str:
        return "—" if value is None else str(value)

    return [
        Table(
            name="events",
            caption=f"XID and GPU-lost events while you held it (newest {EVENTS_SHOWN})",
            columns=[
                Column("When", lambda e: e.occurred_at, text=lambda e: fmt_second(e.occurred_at)),
                Column("Event", lambda e: e.label),
                Column(
                    "Severity",
                    lambda e: e.severity,
                    text=lambda e: e.severity or "—",
                    csv_label="severity",
                ),
                Column("What it means", lambda e: e.meaning),
            ],
            rows=health.events,
            empty="No XID, lost or missing GPU events while you held it.",
        ),
        Table(
            name="errors",
            caption="Days with XID events or ECC errors (last 30 days, UTC)",
            columns=[
                Column("Day", lambda d: d.day.date(), text=lambda d: f"{d.day:%a %d %b %Y}"),
                Column("XID events", lambda d: d.xid_events, numeric=True),
                Column("ECC corrected", lambda d: d.ecc_corrected, numeric=True),
                Column("ECC uncorrected", lambda d: d.ecc_uncorrected, numeric=True),
            ],
            rows=health.error_days,
            empty="No XID events and no ECC errors in the last 30 days.",
        ),
        Table(
            name="remaps",
            caption="Remapped memory rows: each change (last 30 days)",
            columns=[
                Column("From", lambda c: c.at, text=lambda c: fmt_second(c.at)),
                Column(
                    "Correctable",
                    lambda c: c.correctable,
                    text=lambda c: (
                        f"{remap(c.before[0])} → {remap(c.correctable)}"
                        if c.before
                        else f"{remap(c.correctable)} (first reading)"
                    ),
                    numeric=True,
                ),
                Column(
                    "Uncorrectable",
                    lambda c: c.uncorrectable,
                    text=lambda c: (
                        f"{remap(c.before[1])} → {remap(c.uncorrectable)}"
                        if c.before
                        else f"{remap(c.uncorrectable)} (first reading)"
                    ),
                    numeric=True,
                ),
                Column(
                    "Remap pending",
                    lambda c: c.pending,
                    text=lambda c: {None: "—", True: "yes", False: "no"}[c.pending],
                ),
            ],
            rows=health.remaps,
            empty="No remapped-row readings in the last 30 days.",
        ),
    ]


def _timeline(detail: selectors.GpuDetail) -> str:
    states = [(h.hour, h.state) for h in detail.hours]
    start, end = detail.window
    return charts.timeline_svg(
        states,
        title=f"Uptime of GPU {detail.gpu.serial}, hour by hour",
        desc=f"{len(states)} hours from {fmt_when(start)} to {fmt_when(end)}; each hour is "
        "coloured by the state that held most of it. The table 'By day' below lists the "
        "same hours.",
        id_prefix="timeline",
    )


def _charts(detail: selectors.GpuDetail) -> list[str]:
    start, end = detail.window
    span = f"from {fmt_when(start)} to {fmt_when(end)}"
    return [
        charts.line_chart_svg(
            [charts.Point(m.hour, m.utilization) for m in detail.metrics],
            title="GPU utilization, hourly mean (%)",
            desc=f"Hourly mean utilization while reporting, {span}. Figures by day are in "
            "the table 'By day'.",
            unit="%",
            id_prefix="chart-util",
            y_max=Decimal(100),
            area=True,
            start=start,
            end=end,
        ),
        charts.line_chart_svg(
            [charts.Point(m.hour, m.power_w) for m in detail.metrics],
            title="Power draw, hourly mean (W)",
            desc=f"Mean power from the energy counter per hour, {span}.",
            unit=" W",
            id_prefix="chart-power",
            colour="#7a4b00",
            start=start,
            end=end,
        ),
        charts.line_chart_svg(
            [
                charts.Point(m.hour, None if m.temp_max_c is None else Decimal(str(m.temp_max_c)))
                for m in detail.metrics
            ],
            title="Temperature, hourly maximum (°C)",
            desc=f"Highest GPU temperature reported in each hour, {span}.",
            unit=" °C",
            id_prefix="chart-temp",
            colour="#8c1f4e",
            start=start,
            end=end,
        ),
    ]


def _days_table(detail: selectors.GpuDetail) -> Table:
    return Table(
        name="days",
        caption="By day (UTC): hours in each state, utilization, power and temperature",
        columns=[
            Column("Day", lambda d: d.day.date(), text=lambda d: f"{d.day:%a %d %b %Y}"),
            Column("Up (h)", lambda d: fmt_hours(d.up_s), numeric=True),
            Column("Down (h)", lambda d: fmt_hours(d.down_s), numeric=True),
            Column("Maintenance (h)", lambda d: fmt_hours(d.maintenance_s), numeric=True),
            Column("No data (h)", lambda d: fmt_hours(d.no_data_s), numeric=True),
            Column(
                "Utilization",
                lambda d: fmt_decimal(d.utilization, 2) if d.utilization is not None else None,
                text=lambda d: (
                    fmt_decimal(d.utilization, 1) + (" %" if d.utilization is not None else "")
                ),
                numeric=True,
                csv_label="utilization_pct",
            ),
            Column(
                "Power (W)",
                lambda d: fmt_decimal(d.power_w, 1) if d.power_w is not None else None,
                numeric=True,
                csv_label="power_w",
            ),
            Column(
                "Max temperature (°C)",
                lambda d: fmt_decimal(d.temp_max_c, 1) if d.temp_max_c is not None else None,
                numeric=True,
                csv_label="temp_max_c",
            ),
        ],
        rows=list(reversed(detail.days)),
    )


def _hours_table(detail: selectors.GpuDetail) -> Table:
    """Hour by hour; offered as CSV (the page shows the days)."""
    metrics = {m.hour: m for m in detail.metrics}
    rows = [(h, metrics.get(h.hour)) for h in detail.hours]
    return Table(
        name="hours",
        caption="Hour by hour (UTC)",
        columns=[
            Column("Hour", lambda r: r[0].hour),
            Column("State", lambda r: r[0].state),
            Column("Up (s)", lambda r: r[0].up),
            Column("Down (s)", lambda r: r[0].down),
            Column("Maintenance (s)", lambda r: r[0].maintenance),
            Column("No data (s)", lambda r: r[0].no_data),
            Column(
                "Utilization (%)",
                lambda r: (
                    fmt_decimal(r[1].utilization, 2)
                    if r[1] and r[1].utilization is not None
                    else None
                ),
            ),
            Column(
                "Power (W)",
                lambda r: (
                    fmt_decimal(r[1].power_w, 1) if r[1] and r[1].power_w is not None else None
                ),
            ),
            Column(
                "Max temperature (°C)",
                lambda r: (
                    fmt_decimal(r[1].temp_max_c, 1)
                    if r[1] and r[1].temp_max_c is not None
                    else None
                ),
            ),
        ],
        rows=rows,
    )

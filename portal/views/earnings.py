"""The earnings page: money per period across every published period, and per GPU for one.

Final figures only: the GPU lines of the published statements of the user's accounts,
summed as stored (the statements' own figures; nothing is computed a second way). The
running month's preliminary figures are on the overview. Every amount sits inside an element
marked ``data-basis`` that points to the paragraph stating its basis
(``portal.wording.earnings_basis_check``); each chart has its numbers in the table beside it,
and every table has its CSV.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render
from django.utils.safestring import mark_safe

from accounts.models import Owner, User
from billing.engine.intervals import Interval, intersect
from billing.models import RentalGpu, Statement, StatementLine
from billing.selectors.earnings import DayMoney, statement_days_kept, statement_gpu_sums
from fleet.models import Gpu
from portal import charts
from portal.access import owners_of_user, statements_for_user
from portal.selectors import Period, gpu_ids_held_in, held_figures, month_period
from portal.tables import (
    Column,
    Table,
    csv_response,
    export_of,
    fmt_hours,
    fmt_money,
    fmt_pct,
    with_export_links,
)
from portal.views.common import earnings_view, now, period_choices, the_user
from portal.views.money import GROSS_NET, NOT_GUARANTEED, statement_url

BASIS_ID = "earnings-basis"
ZERO = Decimal("0.00")
SECONDS_PER_HOUR = Decimal(3600)
FULL_BPS = Decimal(10_000)
SORTS = ("gpu", "gross", "net", "per_hour")


@dataclass(frozen=True)
class PeriodRow:
    """One published statement's GPU lines summed (an account, a period, a currency)."""

    statement: Statement
    gross: Decimal
    hosting_fee: Decimal
    power_cost: Decimal
    management_fee: Decimal
    net: Decimal

    @property
    def currency(self) -> str:
        return self.statement.currency

    @property
    def costs(self) -> Decimal:
        return self.hosting_fee + self.power_cost + self.management_fee

    @property
    def key(self) -> str:
        return f"{self.statement.period.start:%Y-%m}"


@dataclass(frozen=True)
class GpuRow:
    """One GPU's lines of one published statement, summed (a share change or a move gives a
    GPU several lines)."""

    gpu_id: uuid.UUID
    description: str
    owner: Owner
    currency: str
    gross: Decimal
    costs: Decimal
    net: Decimal
    owned_hours: Decimal  # in-service hours × the share held, summed over the lines

    @property
    def per_hour(self) -> Decimal | None:
        """Realised revenue per GPU-hour: gross ÷ owned in-service hours (None: no hours)."""
        return self.gross / self.owned_hours if self.owned_hours else None


def period_rows(statements: list[Statement]) -> list[PeriodRow]:
    sums = statement_gpu_sums(statements=statements)
    rows = []
    for statement in statements:
        row = sums.get(statement.pk, {})
        rows.append(
            PeriodRow(
                statement,
                gross=row.get("gross") or ZERO,
                hosting_fee=row.get("hosting_fee") or ZERO,
                power_cost=row.get("power_cost") or ZERO,
                management_fee=row.get("management_fee") or ZERO,
                net=row.get("net") or ZERO,
            )
        )
    return sorted(rows, key=lambda r: (r.statement.period.start, r.statement.owner.legal_name))


def gpu_rows(statements: list[Statement], *, sort: str) -> list[GpuRow]:
    by_gpu: dict[tuple[uuid.UUID, uuid.UUID], list[StatementLine]] = defaultdict(list)
    lines = (
        StatementLine.objects.filter(
            statement__in=[s.pk for s in statements], kind=StatementLine.Kind.GPU
        )
        .select_related("statement__owner", "gpu")
        # Each line would carry its statement's frozen inputs, decoded once per line.
        .defer("statement__frozen_inputs")
    )
    for line in lines:
        if line.gpu_id is None:
            raise RuntimeError(f"GPU line {line.pk} has no GPU")
        by_gpu[line.statement_id, line.gpu_id].append(line)
    rows = []
    for (_, gpu_id), mine in by_gpu.items():
        first = mine[0]
        rows.append(
            GpuRow(
                gpu_id=gpu_id,
                description=first.description or (first.gpu.serial if first.gpu else str(gpu_id)),
                owner=first.statement.owner,
                currency=first.statement.currency,
                gross=sum((ln.gross for ln in mine), ZERO),
                costs=sum(
                    (ln.hosting_fee + ln.power_cost + ln.management_fee for ln in mine), ZERO
                ),
                net=sum((ln.net for ln in mine), ZERO),
                owned_hours=sum(
                    (
                        Decimal(ln.in_service_s) * (ln.share_bps or 0) / FULL_BPS / SECONDS_PER_HOUR
                        for ln in mine
                    ),
                    Decimal(0),
                ),
            )
        )
    key = sort.lstrip("-")
    rows.sort(key=lambda r: (r.description, str(r.gpu_id)))
    if key in ("gross", "net", "per_hour"):
        present = [r for r in rows if getattr(r, key) is not None]
        absent = [r for r in rows if getattr(r, key) is None]
        present.sort(key=lambda r: getattr(r, key), reverse=sort.startswith("-"))
        return present + absent  # no figure last, either way
    return rows[::-1] if sort == "-gpu" else rows


@dataclass(frozen=True)
class DayRow:
    """One UTC day of one published statement (an account, a currency)."""

    statement: Statement
    money: DayMoney

    @property
    def currency(self) -> str:
        return self.statement.currency

    @property
    def gross(self) -> Decimal:
        return self.money.gross

    @property
    def hosting_fee(self) -> Decimal:
        return self.money.hosting_fee

    @property
    def power_cost(self) -> Decimal:
        return self.money.power_cost

    @property
    def management_fee(self) -> Decimal:
        return self.money.management_fee

    @property
    def costs(self) -> Decimal:
        return self.money.costs

    @property
    def net(self) -> Decimal:
        return self.money.net


@dataclass(frozen=True)
class MonthDays:
    """The month's published statements by day; those whose frozen inputs cannot say."""

    rows: list[DayRow]
    undivided: list[Statement]


def month_days(statements: list[Statement], month: Period) -> MonthDays:
    """The days of the published statements whose period starts in the month."""
    rows: list[DayRow] = []
    undivided: list[Statement] = []
    for statement in statements:
        if not month.start <= statement.period.start < month.month_end:
            continue
        days = statement_days_kept(statement=statement)
        if days is None:
            undivided.append(statement)
            continue
        rows += [DayRow(statement, day) for day in days]
    return MonthDays(rows, undivided)


@dataclass(frozen=True)
class Occupancy:
    """Up seconds of a GPU (or a day, or the fleet) while the user's accounts held it, and
    those of them inside a rental: rented; the rest of the up time is idle (pool time
    included: a pool is not a rental)."""

    label: str
    up_s: int
    rented_s: int

    @property
    def idle_s(self) -> int:
        return self.up_s - self.rented_s

    @property
    def occupancy(self) -> Decimal | None:
        """Rented ÷ up seconds, 0–1 to 6 places; None without up time."""
        if not self.up_s:
            return None
        return (Decimal(self.rented_s) / Decimal(self.up_s)).quantize(Decimal("0.000001"))


@dataclass(frozen=True)
class OccupancyOf:
    gpus: list[Occupancy]
    days: list[tuple[datetime, Occupancy]]
    fleet: Occupancy


def occupancy_of(*, user: User, period: Period) -> OccupancyOf:
    """Per GPU, per UTC day and for the fleet, over the month (to now while it runs): the
    GPUs' own up seconds while the user's accounts held them (the overview's figures,
    billing's ``held_availability``), and those inside one of their rentals."""
    window = period.interval
    ids = gpu_ids_held_in(user=user, window=window)
    rented: dict[uuid.UUID, list[Interval]] = defaultdict(list)
    for gpu_id, starts_at, ends_at in RentalGpu.objects.filter(
        gpu_id__in=ids, rental__starts_at__lt=window.end, rental__ends_at__gt=window.start
    ).values_list("gpu_id", "rental__starts_at", "rental__ends_at"):
        rented[gpu_id].extend(intersect([Interval(starts_at, ends_at)], [window]))
    days = []
    day = window.start
    while day < window.end:
        days.append(Interval(day, min(day + timedelta(days=1), window.end)))
        day += timedelta(days=1)
    cuts = {d.start for d in days} | {t for pieces in rented.values() for p in pieces for t in p}
    held = held_figures(user=user, gpu_ids=ids, window=window, cuts=cuts)
    serials = dict(Gpu.objects.filter(pk__in=ids).values_list("pk", "serial"))
    per_gpu: list[Occupancy] = []
    per_day_up = [0] * len(days)
    per_day_rented = [0] * len(days)
    for gpu_id in ids:
        usage = held[gpu_id]
        if not usage.runs:
            continue
        pieces = rented.get(gpu_id, [])
        per_gpu.append(
            Occupancy(
                serials[gpu_id],
                usage.total.up_s,
                sum(usage.measure(p).up_s for p in pieces),
            )
        )
        for n, d in enumerate(days):
            per_day_up[n] += usage.measure(d).up_s
            per_day_rented[n] += sum(
                usage.measure(p).up_s for p in intersect(pieces, [d]) if p.seconds
            )
    per_gpu.sort(key=lambda o: o.label)
    return OccupancyOf(
        gpus=per_gpu,
        days=[
            (d.start, Occupancy(f"{d.start:%Y-%m-%d}", up, rented_s))
            for d, up, rented_s in zip(days, per_day_up, per_day_rented, strict=True)
        ],
        fleet=Occupancy("fleet", sum(o.up_s for o in per_gpu), sum(o.rented_s for o in per_gpu)),
    )


def _occupancy_columns(first: str) -> list[Column]:
    return [
        Column(first, lambda o: o.label),
        Column("Hours up", lambda o: o.up_s, text=lambda o: fmt_hours(o.up_s), numeric=True,
               csv_label="up_s"),
        Column("Hours rented", lambda o: o.rented_s, text=lambda o: fmt_hours(o.rented_s),
               numeric=True, csv_label="rented_s"),
        Column("Hours idle (up, not rented)", lambda o: o.idle_s,
               text=lambda o: fmt_hours(o.idle_s), numeric=True, csv_label="idle_s"),
        Column("Occupancy", lambda o: o.occupancy, text=lambda o: fmt_pct(o.occupancy),
               numeric=True, csv_label="occupancy"),
    ]  # fmt: skip


def _money(label: str, attr: str, csv: str) -> Column:
    return Column(
        label,
        lambda r: getattr(r, attr),
        text=lambda r: fmt_money(getattr(r, attr), r.currency),
        numeric=True,
        csv_label=csv,
    )


def _label(start: datetime) -> str:
    return f"{start:%B %Y}"


def earnings_basis(*, periods: list[str], at: datetime) -> str:
    through = f"periods {', '.join(periods)}" if periods else "no period yet"
    return (
        f"Final figures only, as of {at:%Y-%m-%d %H:%M} UTC: the GPU lines of your accounts' "
        f"published statements ({through}), summed as stored. {GROSS_NET} Costs in the chart "
        "are the hosting fee, power cost and management fee together. Realised revenue per "
        "GPU-hour is gross divided by the hours the GPU was in service while your account held "
        "it, times your share. Adjustments and payouts are not in these figures (see each "
        "statement and the payouts page). The running month's preliminary figures are on the "
        f"overview; no projection or forecast is shown. {NOT_GUARANTEED}"
    )


@earnings_view
def earnings(request: HttpRequest) -> HttpResponseBase:
    user, at = the_user(request), now()
    statements = list(
        statements_for_user(user=user)
        .select_related("owner", "period")
        .defer("frozen_inputs")  # large; read only for a month's days, and those are kept
        .order_by("period__start", "owner__legal_name", "currency")
    )
    by_period = period_rows(statements)
    keys = sorted({r.key for r in by_period}, reverse=True)
    chosen = request.GET.get("period") if request.GET.get("period") in keys else None
    chosen = chosen or (keys[0] if keys else None)
    sort = request.GET.get("sort", "gpu")
    sort = sort if sort.lstrip("-") in SORTS else "gpu"
    per_gpu = gpu_rows([s for s in statements if f"{s.period.start:%Y-%m}" == chosen], sort=sort)
    tables = [
        Table(
            name="periods",
            caption="Earnings per period (final, from published statements)",
            columns=[
                Column(
                    "Period",
                    lambda r: r.key,
                    text=lambda r: _label(r.statement.period.start),
                    link=lambda r: statement_url(r.statement.pk),
                ),
                Column("Owner account", lambda r: r.statement.owner.legal_name),
                Column("Currency", lambda r: r.currency),
                _money("Gross", "gross", "gross"),
                _money("Hosting fee", "hosting_fee", "hosting_fee"),
                _money("Power cost", "power_cost", "power_cost"),
                _money("Management fee", "management_fee", "management_fee"),
                _money("Net", "net", "net"),
                Column("Status", lambda r: "final", text=lambda r: "Final"),
            ],
            rows=by_period,
            empty="No statement has been published for your accounts yet.",
            basis_id=BASIS_ID,
        ),
        Table(
            name="gpus",
            caption=f"Earnings per GPU, {_label_of(chosen)} (final)",
            columns=[
                Column("GPU", lambda r: r.description),
                Column("Owner account", lambda r: r.owner.legal_name),
                Column("Currency", lambda r: r.currency),
                _money("Gross", "gross", "gross"),
                _money("Costs", "costs", "costs"),
                _money("Net", "net", "net"),
                Column(
                    "Hours held in service",
                    lambda r: r.owned_hours.quantize(Decimal("0.01")),
                    text=lambda r: f"{r.owned_hours.quantize(Decimal('0.1')):,} h",
                    numeric=True,
                    csv_label="owned_hours",
                ),
                Column(
                    "Revenue per GPU-hour",
                    lambda r: (
                        None if r.per_hour is None else r.per_hour.quantize(Decimal("0.0001"))
                    ),
                    text=lambda r: (
                        "—"
                        if r.per_hour is None
                        else f"{r.per_hour.quantize(Decimal('0.0001')):,} {r.currency}/h"
                    ),
                    numeric=True,
                    csv_label="revenue_per_gpu_hour",
                ),
            ],
            rows=per_gpu,
            empty="No published statement for this period.",
            basis_id=BASIS_ID,
        ),
    ]
    month = month_period(now=at, key=request.GET.get("month"))
    by_day = month_days(statements, month)
    occupied = occupancy_of(user=user, period=month)
    tables += [
        Table(
            name="money_days",
            caption=f"Earnings by day, {month.label} (final, from published statements)",
            columns=[
                Column(
                    "Day (UTC)",
                    lambda r: f"{r.money.day:%Y-%m-%d}",
                    link=lambda r: statement_url(r.statement.pk),
                ),
                Column("Owner account", lambda r: r.statement.owner.legal_name),
                Column("Currency", lambda r: r.currency),
                _money("Gross", "gross", "gross"),
                _money("Hosting fee", "hosting_fee", "hosting_fee"),
                _money("Power cost", "power_cost", "power_cost"),
                _money("Management fee", "management_fee", "management_fee"),
                _money("Net", "net", "net"),
            ],
            rows=by_day.rows,
            empty=f"No published statement for {month.label}: "
            + (
                "the month is still running; its figures so far are preliminary, on the overview."
                if month.running
                else "daily figures come from a published statement."
            ),
            basis_id=BASIS_ID,
        ),
        Table(
            name="occupancy_days",
            caption=f"Occupancy by day, {month.label}",
            columns=_occupancy_columns("Day (UTC)"),
            rows=[o for _, o in occupied.days],
        ),
        Table(
            name="occupancy_gpus",
            caption=f"Occupancy per GPU, {month.label}",
            columns=_occupancy_columns("GPU"),
            rows=occupied.gpus,
            empty="None of your GPUs was held in service in this month.",
        ),
    ]
    wanted = export_of(request, tables)
    if wanted is not None:
        return csv_response(wanted, stamp=at)
    with_export_links(request, tables)
    return render(
        request,
        "portal/earnings.html",
        {
            "owners": list(owners_of_user(user=user)),
            "basis_id": BASIS_ID,
            "basis": earnings_basis(periods=[_label_of(k) for k in sorted(keys)], at=at),
            "charts": _charts(by_period),
            "tables": {t.name: t for t in tables},
            "periods": [(k, _label_of(k)) for k in keys],
            "chosen": chosen,
            "sort": sort,
            "sorts": _sort_links(chosen, sort),
            "month": month,
            "months": period_choices(at),
            "occupancy": occupied,
            "fleet_occupancy": (
                f"Fleet: {fmt_hours(occupied.fleet.rented_s)} h rented of "
                f"{fmt_hours(occupied.fleet.up_s)} h up, {fmt_hours(occupied.fleet.idle_s)} h "
                "idle; "
                f"occupancy {fmt_pct(occupied.fleet.occupancy)}."
            ),
            "occupancy_chart": _occupancy_chart(occupied, month),
            "day_charts": _day_charts(by_day.rows, month),
            "undivided": by_day.undivided,
        },
    )


def _label_of(key: str | None) -> str:
    if key is None:
        return "no period"
    return _label(datetime.strptime(f"{key}-01", "%Y-%m-%d"))  # noqa: DTZ007 - a label only


def _charts(rows: list[PeriodRow]) -> list[str]:
    """One chart per owner account and currency: amounts in different currencies or of
    different accounts are never added up."""
    groups: dict[tuple[str, str], list[PeriodRow]] = defaultdict(list)
    for row in rows:
        groups[row.statement.owner.legal_name, row.currency].append(row)
    out: list[str] = []
    for n, ((owner, currency), mine) in enumerate(sorted(groups.items())):
        bars = [
            charts.PeriodMoney(f"{r.statement.period.start:%b %Y}", r.gross, r.costs, r.net)
            for r in mine
        ]
        out.append(
            mark_safe(  # noqa: S308 - built from escaped text and numbers only
                charts.period_money_svg(
                    bars,
                    title=f"Gross, costs and net per period, {owner}, {currency} (final)",
                    desc=f"Bars per published period from {bars[0].label} to {bars[-1].label}: "
                    f"gross, the hosting fee, power cost and management fee together, and net, "
                    f"in {currency}. The table below has the same figures.",
                    currency=currency,
                    id_prefix=f"money-{n}",
                )
            )
        )
    return out


def _day_charts(rows: list[DayRow], month: Period) -> list[str]:
    """One chart per owner account and currency, as for the periods."""
    groups: dict[tuple[str, str], list[DayRow]] = defaultdict(list)
    for row in rows:
        groups[row.statement.owner.legal_name, row.currency].append(row)
    out: list[str] = []
    for n, ((owner, currency), mine) in enumerate(sorted(groups.items())):
        bars = [charts.PeriodMoney(f"{r.money.day:%d}", r.gross, r.costs, r.net) for r in mine]
        out.append(
            mark_safe(  # noqa: S308 - built from escaped text and numbers only
                charts.period_money_svg(
                    bars,
                    title=f"Gross, costs and net by day, {month.label}, {owner}, {currency} "
                    "(final)",
                    desc=f"Bars per UTC day of {month.label}: gross, the hosting fee, power "
                    f"cost and management fee together, and net, in {currency}. The table "
                    "below has the same figures.",
                    currency=currency,
                    id_prefix=f"money-day-{n}",
                    x_title=f"Day of {month.label} (UTC)",
                )
            )
        )
    return out


def _occupancy_chart(occupied: OccupancyOf, month: Period) -> str:
    to_date = " (month to date)" if month.running else ""
    return mark_safe(  # noqa: S308 - built from escaped text and numbers only
        charts.daily_bars_svg(
            [
                charts.Bar(day, None if o.occupancy is None else o.occupancy * 100)
                for day, o in occupied.days
            ],
            title=f"Occupancy by day, {month.label}{to_date}, in %",
            desc="One bar per UTC day: the hours your GPUs were rented as a percentage of the "
            "hours they were up that day (a day without up time is a gap). The table below "
            "has the hours.",
            unit="%",
            id_prefix="occupancy",
            y_max=Decimal(100),
        )
    )


def _sort_links(chosen: str | None, sort: str) -> list[tuple[str, str, bool]]:
    """(label, query, current) for each way to sort the per-GPU table; choosing the current
    one again reverses it."""
    out = []
    for key, label in (
        ("gpu", "GPU"),
        ("gross", "Gross"),
        ("net", "Net"),
        ("per_hour", "Revenue per GPU-hour"),
    ):
        current = sort.lstrip("-") == key
        target = f"-{key}" if current and not sort.startswith("-") else key
        query = f"period={chosen}&sort={target}" if chosen else f"sort={target}"
        out.append((label, query, current))
    return out

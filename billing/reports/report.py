"""One statement as one report, rendered three ways (CSV, JSON, PDF) from the same data.

``statement_report`` reads only what cannot change once the statement is published: the
statement row and its lines (immutable in the database), its frozen inputs (adjustments,
payouts, per GPU the usage cells cut at every UTC midnight, and the maintenance and incidents
that touched it, as recorded when the statement was computed) and the disclosure version it
was issued under (immutable too). So a published statement's figures never change. Around
them the report carries what a statement is printed with and is read as it is now: the
operator's details (``settings.STEWARD_OPERATOR``), the owner's account number (never changes)
and postal address, the statement number (from the account number, the period and the
currency) and the payouts of the statement's balance recorded since it was published. Every
earnings figure travels with its basis: the period, final or preliminary, gross vs net and the
costs included, and the not-guaranteed statement.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db.models import Exists, Q, Subquery
from django.db.models.functions import TruncDate

from accounts.models import Disclosure, Owner
from billing.engine.cells import Cell, CellUsage
from billing.engine.document import BASIS, NOT_GUARANTEED
from billing.engine.intervals import Interval, intersect
from billing.engine.terms import statement_terms
from billing.engine.usage import exact_decimal
from billing.models import Payout, Statement, StatementLine
from billing.models.statements import LINE_FIELDS
from fleet.models import Cluster

SIX = Decimal("0.000001")
DAY = timedelta(days=1)

COST_LABELS = {
    "hosting_fee": "hosting fee",
    "power_cost": "power cost",
    "management_fee": "management fee",
}


@dataclass(frozen=True)
class Basis:
    """What every earnings figure of the report means."""

    period_start: datetime
    period_end: datetime
    finality: str  # "final" (published) or "preliminary" (a draft)
    gross: str
    net: str
    costs_included: tuple[str, ...]
    time_zone: str
    not_guaranteed: str

    @property
    def sentence(self) -> str:
        """The basis in one line, for next to a figure."""
        costs = ", ".join(COST_LABELS[c] for c in self.costs_included)
        return (
            f"{self.finality.capitalize()} figures for {period_label(self)} (UTC). Gross: "
            f"{self.gross}. Net: gross minus {costs}. {self.not_guaranteed}"
        )


@dataclass(frozen=True)
class Event:
    kind: str  # "incident" or "maintenance"
    id: int
    title: str
    cause: str  # an incident's cause; "" for maintenance
    starts_at: datetime
    ends_at: datetime | None  # None: still open when the statement was computed
    gpus: tuple[str, ...]  # serials of the owner's GPUs it touched


@dataclass(frozen=True)
class Day:
    """The owner's GPUs over one UTC day, counting only the runs on the statement."""

    day: datetime
    in_service_s: int
    up_s: int
    down_s: int
    maintenance_s: int
    no_data_s: int
    availability: Decimal | None  # up ÷ (in service − maintenance), 0–1
    utilization: Decimal | None  # mean over up time, 0–1


@dataclass(frozen=True)
class Operator:
    """Who issues the statement (``settings.STEWARD_OPERATOR``)."""

    legal_name: str
    address: tuple[str, ...]
    registration: str


@dataclass(frozen=True)
class Disclosed:
    version: str
    sha256: str
    text: str


@dataclass(frozen=True)
class Report:
    statement_id: str
    owner_id: str
    owner_name: str
    currency: str
    status: str
    computed_at: datetime
    published_at: datetime | None
    basis: Basis
    disclosure: Disclosed
    content_sha256: str
    opening_balance: Decimal
    lines_total: Decimal
    adjustments_total: Decimal
    payouts_total: Decimal
    closing_balance: Decimal
    gross_total: Decimal
    costs_total: dict[str, Decimal]
    lines: tuple[dict[str, Any], ...]  # LINE_FIELDS of every line, GPU lines first
    # Per line, the terms it was computed from (``billing.engine.terms``); None for an
    # adjustment, and for every line of a statement whose frozen inputs hold no cells.
    terms: tuple[dict[str, Any] | None, ...]
    frozen_inputs: dict[str, Any]  # what the figures were computed from, as stored
    adjustments: tuple[dict[str, Any], ...]  # as frozen: id, amount, reason, source, corrects_*
    payouts: tuple[dict[str, Any], ...]  # as frozen: reference, amount, paid_on
    events: tuple[Event, ...] | None  # None: not recorded with this statement
    days: tuple[Day, ...] | None  # None: its frozen inputs are not cut by day
    statement_number: str  # ``statement_number``: printed, quoted by owners and operators
    account_number: int  # the owner's
    owner_address: tuple[str, ...]  # the owner's postal address now, line by line
    operator: Operator
    # The payouts of this statement's closing balance (``balance_paid_by``), as
    # reference, amount and paid_on; none for a draft.
    paid_by: tuple[dict[str, str], ...]

    @property
    def period_label(self) -> str:
        return period_label(self.basis)

    @property
    def final(self) -> bool:
        return self.basis.finality == "final"


def period_label(basis: Basis) -> str:
    return period_name(basis.period_start, basis.period_end)


def period_name(start: datetime, end: datetime) -> str:
    """ "February 2026" for a calendar month, else the two instants (UTC)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if start == start.replace(day=1, hour=0, minute=0, second=0, microsecond=0) and end == (
        _next_month(start)
    ):
        return f"{start:%B %Y}"
    return f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}"


def _next_month(at: datetime) -> datetime:
    return at.replace(year=at.year + at.month // 12, month=at.month % 12 + 1)


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def ratio(value: Fraction | None) -> Decimal | None:
    return None if value is None else exact_decimal(value).quantize(SIX, ROUND_HALF_EVEN)


def statement_number(*, account_number: int, period_start: datetime, currency: str) -> str:
    """A statement's number, e.g. ``100001-20260201-EUR``: the owner's account number, the
    day its period starts (with the time, ``T063000``, when not midnight UTC) and its currency.
    Unique, as one statement is issued per owner, period and currency and no two periods start
    at the same instant; the same every time it is printed."""
    start = period_start.astimezone(UTC)
    day = f"{start:%Y%m%d}" if start.time() == time(0) else f"{start:%Y%m%dT%H%M%S}"
    return f"{account_number}-{day}-{currency}"


def operator() -> Operator:
    found = settings.STEWARD_OPERATOR
    return Operator(
        legal_name=str(found["legal_name"]),
        address=tuple(str(line) for line in found["address"]),
        registration=str(found["registration"]),
    )


def balance_paid_by(statement: Statement) -> list[Payout]:
    """The payouts of a published statement's closing balance: the owner's, in its currency,
    dated from its period's end until the end of the period of their next published statement
    in that currency (payouts after that pay that statement's balance). ``payout_record``
    refuses payouts dated before the end of the last published statement's period, so each
    payout pays exactly one statement's balance. None for a draft."""
    if statement.status != Statement.Status.PUBLISHED:
        return []
    following = Statement.objects.filter(
        owner_id=statement.owner_id,
        currency=statement.currency,
        status=Statement.Status.PUBLISHED,
        period__start__gte=statement.period.end,
    ).order_by("period__start")
    until = TruncDate(Subquery(following.values("period__end")[:1]), tzinfo=UTC)
    return list(
        Payout.objects.filter(
            owner_id=statement.owner_id,
            currency=statement.currency,
            paid_on__gte=_day(statement.period.end),
        )
        .filter(Q(paid_on__lt=until) | ~Exists(following))
        .order_by("paid_on", "reference")
    )


def _day(at: datetime) -> date:
    """The day a period boundary falls on, for payouts (dated by day, counted from 00:00 UTC)."""
    return at.astimezone(UTC).date()


def statement_report(statement: Statement) -> Report:
    """The report of one statement. Reads the statement's own rows, its owner, the disclosure
    row and the payouts of its balance."""
    statement = Statement.objects.select_related("period", "owner").get(pk=statement.pk)
    frozen: dict[str, Any] = statement.frozen_inputs or {}
    rows = list(StatementLine.objects.filter(statement=statement).order_by("position"))
    lines = tuple({name: getattr(row, name) for name in LINE_FIELDS} for row in rows)
    gpu_rows = [r for r in rows if r.kind == StatementLine.Kind.GPU]
    disclosure = Disclosure.objects.filter(version=statement.disclosure_version).first()
    owner: Owner = statement.owner
    # As issued; a statement computed before names were frozen shows the name it has now.
    owner_name = frozen.get("owner_name")
    if owner_name is None:
        owner_name = owner.legal_name
    published = statement.status == Statement.Status.PUBLISHED
    terms = line_terms(frozen=frozen, kinds=[line["kind"] for line in lines])
    return Report(
        statement_id=str(statement.pk),
        owner_id=str(statement.owner_id),
        owner_name=owner_name,
        currency=statement.currency,
        status=statement.status,
        computed_at=statement.computed_at,
        published_at=statement.published_at,
        basis=Basis(
            period_start=statement.period.start.astimezone(UTC),
            period_end=statement.period.end.astimezone(UTC),
            finality="final" if published else "preliminary",
            gross=str(BASIS["gross"]),
            net=str(BASIS["net"]),
            costs_included=tuple(BASIS["costs_included"]),
            time_zone=str(BASIS["time_zone"]),
            not_guaranteed=NOT_GUARANTEED,
        ),
        disclosure=Disclosed(
            version=statement.disclosure_version,
            sha256=statement.disclosure_sha256,
            text=disclosure.text if disclosure is not None else "",
        ),
        content_sha256=statement.content_sha256,
        opening_balance=statement.opening_balance,
        lines_total=statement.lines_total,
        adjustments_total=statement.adjustments_total,
        payouts_total=statement.payouts_total,
        closing_balance=statement.closing_balance,
        gross_total=sum((r.gross for r in gpu_rows), Decimal("0.00")),
        costs_total={
            name: sum((getattr(r, name) for r in gpu_rows), Decimal("0.00")) for name in COST_LABELS
        },
        lines=lines,
        terms=terms,
        frozen_inputs=frozen,
        adjustments=tuple(frozen.get("adjustments", [])),
        payouts=tuple(frozen.get("payouts", [])),
        events=_events(frozen, gpu_rows),
        days=_days(
            statement,
            frozen,
            gpu_rows,
            [t for t, line in zip(terms, lines, strict=True) if line["kind"] == "gpu"],
        ),
        statement_number=statement_number(
            account_number=owner.account_number,
            period_start=statement.period.start,
            currency=statement.currency,
        ),
        account_number=owner.account_number,
        owner_address=tuple(
            line.strip() for line in owner.postal_address.splitlines() if line.strip()
        ),
        operator=operator(),
        paid_by=tuple(
            {
                "reference": p.reference,
                "amount": str(p.amount),
                "paid_on": p.paid_on.isoformat(),
            }
            for p in balance_paid_by(statement)
        ),
    )


def line_terms(
    *, frozen: dict[str, Any], kinds: Sequence[str]
) -> tuple[dict[str, Any] | None, ...]:
    """The terms of each line of a statement, given its frozen inputs and its lines' kinds
    in position order: the GPU lines are stored in the content's order, which
    ``statement_terms`` follows; None for an adjustment, and for every line when the frozen
    inputs hold no cells. Cluster names not frozen with the statement are read (one query)."""
    found = statement_terms(frozen) if frozen else None
    gpu_count = sum(1 for kind in kinds if kind == StatementLine.Kind.GPU)
    if found is None or len(found) != gpu_count:
        return tuple(None for _ in kinds)
    unnamed = {t["cluster_id"] for t in found if t["cluster_name"] is None}
    if unnamed:  # computed before cluster names were frozen: the name it has now
        names = dict(Cluster.objects.filter(pk__in=unnamed).values_list("pk", "name"))
        for t in found:
            if t["cluster_name"] is None:
                t["cluster_name"] = names.get(uuid.UUID(t["cluster_id"]))
    ordered = iter(found)
    return tuple(next(ordered) if kind == StatementLine.Kind.GPU else None for kind in kinds)


def _events(frozen: dict[str, Any], rows: list[StatementLine]) -> tuple[Event, ...] | None:
    gpus = frozen.get("gpus")
    if gpus is None or any("events" not in g for g in gpus):
        return None
    held: dict[str, list[Interval]] = defaultdict(list)
    for row in rows:
        if row.starts_at is not None and row.ends_at is not None:
            held[str(row.gpu_id)].append(Interval(row.starts_at, row.ends_at))
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for entry in gpus:
        for kind, pk, title, cause, starts, ends in entry["events"]:
            start = _parse(starts)
            end = _parse(ends)
            if start is None:
                raise ValueError(f"{kind} {pk} has no start in the frozen inputs")
            span = Interval(start, end or datetime.max.replace(tzinfo=UTC))
            if not intersect([span], held.get(entry["gpu_id"], [])):
                continue  # the GPU was not the owner's then
            event = found.setdefault(
                (kind, pk),
                {
                    "kind": kind,
                    "id": pk,
                    "title": title,
                    "cause": cause,
                    "start": start,
                    "end": end,
                    "gpus": set(),
                },
            )
            event["gpus"].add(entry["serial"])
    return tuple(
        Event(
            kind=e["kind"],
            id=e["id"],
            title=e["title"],
            cause=e["cause"],
            starts_at=e["start"],
            ends_at=e["end"],
            gpus=tuple(sorted(e["gpus"])),
        )
        for e in sorted(found.values(), key=lambda e: (e["start"], e["kind"], e["id"]))
    )


def _days(
    statement: Statement,
    frozen: dict[str, Any],
    rows: list[StatementLine],
    terms: Sequence[dict[str, Any] | None],
) -> tuple[Day, ...] | None:
    """Per UTC day, the owner's GPU runs measured from the frozen cells (as the lines were)."""
    start, end = statement.period.start, statement.period.end
    days = []
    day = start
    while day < end:
        days.append(Interval(day, min(day + DAY, end)))
        day += DAY
    # A GPU that changed clusters has an entry (and a line) per cluster: each line is
    # measured on its own cluster's cells, named by its terms.
    usage = {
        (g["gpu_id"], g.get("cluster_id")): CellUsage([Cell.from_json(c) for c in g["cells"]])
        for g in frozen.get("gpus", [])
        if g.get("cells")
    }
    by_gpu = {gpu: cells for (gpu, _), cells in usage.items()}
    clusters = [t["cluster_id"] if t is not None else None for t in terms]
    seconds = {d.start: [0, 0, 0, 0, 0] for d in days}  # in service, up, down, maint., none
    busy = {d.start: Decimal(0) for d in days}
    for row, cluster in zip(rows, clusters, strict=True):
        if row.starts_at is None or row.ends_at is None:
            continue
        cells = usage.get((str(row.gpu_id), cluster)) or by_gpu.get(str(row.gpu_id))
        if cells is None:
            return None
        for d in days:
            for piece in intersect([d], [Interval(row.starts_at, row.ends_at)]):
                try:
                    m = cells.measure(piece)
                except ValueError:
                    return None  # cells not cut at midnight (computed before they were)
                got = (m.in_service_s, m.up_s, m.down_s, m.maintenance_s, m.no_data_s)
                seconds[d.start] = [a + b for a, b in zip(seconds[d.start], got, strict=True)]
                busy[d.start] += m.busy_s
    out = []
    for d in days:
        in_service, up, down, maintenance, no_data = seconds[d.start]
        counted = in_service - maintenance
        out.append(
            Day(
                day=d.start,
                in_service_s=in_service,
                up_s=up,
                down_s=down,
                maintenance_s=maintenance,
                no_data_s=no_data,
                availability=ratio(Fraction(up, counted)) if counted else None,
                utilization=ratio(Fraction(busy[d.start]) / up) if up else None,
            )
        )
    return tuple(out)


__all__ = [
    "LINE_FIELDS",
    "Basis",
    "Day",
    "Event",
    "Operator",
    "Report",
    "balance_paid_by",
    "line_terms",
    "statement_number",
    "statement_report",
]

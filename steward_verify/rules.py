"""The accounting rules (docs/accounting.md, rules 1-8), applied to a statement's frozen inputs.

Exact rationals (``Fraction``) throughout; values are rounded only where the rules round:
each UTC hour's busy time and energy (halves away from zero, 0.001 %·s and 0.000000001 kWh),
money once per line to the cent (half to even), ratios to six places (half to even).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Any

CENT = Decimal("0.01")
SIX = Decimal("0.000001")
BUSY_QUANTUM = Decimal("0.001")
ENERGY_QUANTUM = Decimal("0.000000001")
MJ_PER_KWH = 3_600_000_000
FULL_BPS = 10_000

# What every statement's canonical content says its figures mean (docs/accounting.md, "The
# canonical content"): hashed with the figures, so the verifier must know it word for word.
BASIS: dict[str, Any] = {
    "gross": "the owner's share of the revenue the GPU earned (rentals and pool), before costs",
    "net": "gross minus hosting fee, power cost and management fee",
    "costs_included": ["hosting_fee", "power_cost", "management_fee"],
    "finality": "final once published; preliminary while a draft",
    "time_zone": "UTC",
}


class RuleError(ValueError):
    """The inputs cannot be computed by the rules (an uncovered span, a cut inside a cell)."""


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def decimal_of(value: Fraction) -> Decimal:
    """An exact rational as a Decimal precise enough for any rounding below."""
    with localcontext() as context:
        context.prec = 80
        return Decimal(value.numerator) / Decimal(value.denominator)


def cents(value: Fraction | Decimal) -> Decimal:
    exact = decimal_of(value) if isinstance(value, Fraction) else value
    return exact.quantize(CENT, rounding=ROUND_HALF_EVEN)


def six(value: Fraction | Decimal) -> str:
    exact = decimal_of(value) if isinstance(value, Fraction) else value
    return str(exact.quantize(SIX, rounding=ROUND_HALF_EVEN))


def hour_round(value: Fraction, quantum: Decimal) -> Fraction:
    return Fraction(decimal_of(value).quantize(quantum, rounding=ROUND_HALF_UP))


Span = tuple[datetime, datetime]


def overlap(a: Span, b: Span) -> Span | None:
    start, end = max(a[0], b[0]), min(a[1], b[1])
    return (start, end) if start < end else None


def seconds(span: Span) -> int:
    return int((span[1] - span[0]).total_seconds())


@dataclass(frozen=True)
class Usage:
    """Rule 1-3 and energy over a span: seconds by state, busy seconds, kWh."""

    in_service_s: int
    maintenance_s: int
    down_s: int
    up_s: int
    no_data_s: int
    busy_s: Fraction  # Σ utilization (0-1) × up seconds
    energy_kwh: Fraction
    operator_incident_s: int
    down_without_incident_s: int  # telemetry said down; no incident or maintenance covers it


@dataclass(frozen=True)
class CellFacts:
    span: Span
    in_service: bool
    maintenance: bool
    incident: bool
    operator_incident: bool
    up_s: int  # seconds telemetry observed up or degraded
    down_s: int  # seconds telemetry observed down
    busy_pct_s: Fraction  # whole hours: Σ utilization % × up seconds, each hour rounded
    energy_kwh: Fraction  # whole hours, each hour rounded
    partial: tuple[tuple[str, Fraction, int], ...]  # (hour, Σ util % × s, Σ mJ × s of 60)


def cell_facts(raw: Sequence[Any]) -> CellFacts:
    return CellFacts(
        span=(instant(raw[0]), instant(raw[1])),
        in_service=bool(raw[2]),
        maintenance=bool(raw[3]),
        incident=bool(raw[4]),
        operator_incident=bool(raw[5]),
        up_s=int(raw[6]),
        down_s=int(raw[7]),
        busy_pct_s=Fraction(Decimal(raw[8])),
        energy_kwh=Fraction(Decimal(raw[9])),
        partial=tuple((h, Fraction(Decimal(b)), int(e)) for h, b, e in raw[10]),
    )


def usage(cells: Sequence[CellFacts], span: Span) -> Usage:
    """The GPU's usage over ``span``, which must be made of whole cells."""
    inside = [c for c in cells if c.span[0] >= span[0] and c.span[1] <= span[1]]
    if sum(seconds(c.span) for c in inside) != seconds(span):
        raise RuleError(f"{z(span[0])} to {z(span[1])} is not made of whole cells")
    in_service = maintenance = down = up = operator = telemetry_down = 0
    busy = energy = Fraction(0)
    busy_hours: dict[str, Fraction] = {}
    energy_hours: dict[str, int] = {}
    for c in inside:
        if not c.in_service:
            continue  # not counted at all (rule 1)
        length = seconds(c.span)
        in_service += length
        operator += length if c.operator_incident else 0
        energy += c.energy_kwh  # every in-service second carries its energy
        for hour, _, mj_s in c.partial:
            energy_hours[hour] = energy_hours.get(hour, 0) + mj_s
        if c.maintenance:
            maintenance += length
        elif c.incident:
            down += length
        else:
            up += c.up_s
            down += c.down_s
            telemetry_down += c.down_s
            busy += c.busy_pct_s
            for hour, pct_s, _ in c.partial:
                busy_hours[hour] = busy_hours.get(hour, Fraction(0)) + pct_s
    busy += sum((hour_round(v, BUSY_QUANTUM) for v in busy_hours.values()), Fraction(0))
    energy += sum(
        (hour_round(Fraction(v, 60 * MJ_PER_KWH), ENERGY_QUANTUM) for v in energy_hours.values()),
        Fraction(0),
    )
    return Usage(
        in_service_s=in_service,
        maintenance_s=maintenance,
        down_s=down,
        up_s=up,
        no_data_s=in_service - maintenance - down - up,
        busy_s=busy / 100,
        energy_kwh=energy,
        operator_incident_s=operator,
        down_without_incident_s=telemetry_down,
    )


@dataclass(frozen=True)
class Run:
    owner: str
    span: Span
    bps: int


def owner_runs(ownership: Sequence[Any], period: Span) -> list[Run]:
    """Rule 5: per owner, the stretches of constant share, clipped to the period, in time
    order (between runs that start together, by owner id)."""
    runs: list[Run] = []
    for start, end, shares in sorted(ownership, key=lambda s: s[0]):
        piece = overlap((instant(start), instant(end)), period)
        if piece is None:
            continue
        for owner, bps in sorted(shares.items()):
            before = [r for r in runs if r.owner == owner]
            last = before[-1] if before else None
            if last is not None and last.bps == bps and last.span[1] == piece[0]:
                runs[runs.index(last)] = Run(owner, (last.span[0], piece[1]), bps)
            else:
                runs.append(Run(owner, piece, bps))
    return sorted(runs, key=lambda r: (r.span[0], r.owner))


def largest_remainder(total: Decimal, weights: Sequence[Fraction]) -> list[Decimal]:
    """Rule 7: each party its exact share rounded down to the cent, then the cents left one
    each to the largest remainders; ties to the larger weight, then the party listed first."""
    whole = sum(weights, Fraction(0))
    if total == 0 or whole == 0:
        return [Decimal("0.00")] * len(weights)
    units = int(abs(total) / CENT)
    sign = 1 if total > 0 else -1
    exact = [Fraction(units) * w / whole for w in weights]
    floors = [e.numerator // e.denominator for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - floors[i]), -weights[i], i))
    for i in order[: units - sum(floors)]:
        floors[i] += 1
    return [(sign * f) * CENT for f in floors]


@dataclass(frozen=True)
class Card:
    span: Span
    fee: Fraction
    price: Fraction
    pue: Fraction
    pct: Fraction
    waive: bool  # operator-caused incidents
    waive_down: bool  # down time with no incident
    raw: dict[str, Any]


@dataclass(frozen=True)
class ComputedLine:
    owner: str
    document: dict[str, Any]  # the line as the canonical content holds it
    terms: dict[str, Any]  # the line's terms as the export shows them


def gpu_lines(entry: dict[str, Any], period: Span) -> list[ComputedLine]:
    """Rules 4-7 for one GPU in one cluster: every owner's line, with its terms."""
    cells = sorted((cell_facts(c) for c in entry["cells"]), key=lambda c: c.span[0])
    measured: dict[Span, Usage] = {}

    def use(span: Span) -> Usage:
        if span not in measured:
            measured[span] = usage(cells, span)
        return measured[span]

    basis = entry["pool_basis"]

    def weight(u: Usage) -> Fraction:
        if basis == "up_seconds":
            return Fraction(u.up_s)
        if basis == "busy_gpu_hours":
            return u.busy_s  # busy seconds: the same ratios as busy GPU-hours
        raise RuleError(f"unknown pool basis {basis!r}")

    rentals = [(instant(a), instant(b), Fraction(Decimal(rate))) for a, b, rate in entry["rentals"]]

    def rented(span: Span) -> list[tuple[Span, Fraction, int]]:
        out = []
        for start, end, rate in rentals:
            piece = overlap((start, end), span)
            if piece is not None:
                out.append((piece, rate, use(piece).up_s))
        return out

    def rental_revenue(span: Span) -> Fraction:
        return sum((rate * up / 3600 for _, rate, up in rented(span)), Fraction(0))

    pool_part = Decimal(entry["pool_cents"])
    gpu_weight = weight(use(period))

    def revenue(span: Span) -> Fraction:
        pool = Fraction(pool_part) * weight(use(span)) / gpu_weight if gpu_weight else Fraction(0)
        return pool + rental_revenue(span)

    rental_cents = cents(rental_revenue(period))
    gpu_total = pool_part + rental_cents
    runs = owner_runs(entry["ownership"], period)
    run_weights = [revenue(r.span) * r.bps / FULL_BPS for r in runs]
    operator = max(revenue(period) - sum(run_weights, Fraction(0)), Fraction(0))
    grosses = largest_remainder(gpu_total, [*run_weights, operator])

    cards = [
        Card(
            span=(instant(r["from"]), instant(r["to"])),
            fee=Fraction(Decimal(r["hosting_fee_per_gpu_month"])),
            price=Fraction(Decimal(r["price_per_kwh"])),
            pue=Fraction(Decimal(r["pue"])),
            pct=Fraction(Decimal(r["management_fee_pct"])),
            waive=bool(r["waive_hosting_in_operator_incidents"]),
            waive_down=bool(r.get("waive_hosting_when_down", False)),
            raw=r,
        )
        for r in entry["rates"]
    ]
    period_s = seconds(period)
    out = []
    for run, gross in zip(runs, grosses, strict=False):
        share = Fraction(run.bps, FULL_BPS)
        pieces = sorted(
            ((p, card) for card in cards if (p := overlap(run.span, card.span)) is not None),
            key=lambda pc: pc[0][0],
        )
        covered = sum(seconds(p) for p, _ in pieces)
        if covered != seconds(run.span):
            _refuse_uncovered(run.span, pieces, use, revenue)
        hosting = power = fee_weighted = earned = Fraction(0)
        card_terms = []
        for piece, card in pieces:
            u = use(piece)
            waived = u.operator_incident_s if card.waive else 0
            waived_down = u.down_without_incident_s if card.waive_down else 0
            hosting += card.fee * (u.in_service_s - waived - waived_down) * share / period_s
            power += u.energy_kwh * card.pue * card.price * share
            piece_revenue = revenue(piece)
            fee_weighted += piece_revenue * card.pct / 100
            earned += piece_revenue
            card_terms.append(
                {
                    "from": z(piece[0]),
                    "to": z(piece[1]),
                    "hosting_fee_per_gpu_month": card.raw["hosting_fee_per_gpu_month"],
                    "in_service_s": u.in_service_s,
                    "waives_operator_incidents": card.waive,
                    "waived_incident_s": waived,
                    "waives_down": card.waive_down,
                    "waived_down_s": waived_down,
                    "period_s": period_s,
                    "energy_kwh": str(decimal_of(u.energy_kwh)),
                    "pue": card.raw["pue"],
                    "price_per_kwh": card.raw["price_per_kwh"],
                    "management_fee_pct": card.raw["management_fee_pct"],
                }
            )
        fee_rate = fee_weighted / earned if earned else Fraction(0)
        line_usage = use(run.span)
        hosting_c, power_c = cents(hosting), cents(power)
        management_c = cents(Fraction(gross) * fee_rate)
        counted = line_usage.in_service_s - line_usage.maintenance_s
        document = {
            "gpu_id": entry["gpu_id"],
            "serial": entry["serial"],
            "starts_at": z(run.span[0]),
            "ends_at": z(run.span[1]),
            "share_bps": run.bps,
            "in_service_s": line_usage.in_service_s,
            "up_s": line_usage.up_s,
            "down_s": line_usage.down_s,
            "maintenance_s": line_usage.maintenance_s,
            "no_data_s": line_usage.no_data_s,
            "availability": six(Fraction(line_usage.up_s, counted)) if counted > 0 else None,
            "utilization": six(line_usage.busy_s / line_usage.up_s) if line_usage.up_s else None,
            "busy_gpu_hours": six(line_usage.busy_s / 3600),
            "energy_kwh": six(line_usage.energy_kwh),
            "gross": str(gross),
            "hosting_fee": str(hosting_c),
            "power_cost": str(power_c),
            "management_fee": str(management_c),
            "net": str(gross - hosting_c - power_c - management_c),
        }
        run_revenue = revenue(run.span)
        in_service = [c.span for c in cells if c.in_service and overlap(c.span, run.span)]
        span = (
            (max(in_service[0][0], run.span[0]), min(in_service[-1][1], run.span[1]))
            if in_service
            else run.span
        )
        total_weight = entry.get("pool_total_weight")
        terms = {
            "cluster_id": entry["cluster_id"],
            "cluster_name": entry.get("cluster_name"),
            "span": [z(span[0]), z(span[1])],
            "up_s": line_usage.up_s,
            "share": {"bps": run.bps, "from": z(run.span[0]), "to": z(run.span[1])},
            "rentals": [
                {
                    "from": z(piece[0]),
                    "to": z(piece[1]),
                    "rate_per_gpu_hour": str(decimal_of(rate)),
                    "up_s": up,
                    "amount": six(rate * up / 3600),
                }
                for piece, rate, up in rented(run.span)
            ],
            "pool": {
                "basis": basis,
                "cluster_amount": entry.get("pool_amount"),
                "gpu_weight": str(decimal_of(gpu_weight)),
                "total_weight": None if total_weight is None else str(total_weight),
                "gpu_part": str(pool_part),
                "run_weight": str(decimal_of(weight(line_usage))),
            },
            "revenue": {
                "gpu_rentals": str(rental_cents),
                "gpu_total": str(gpu_total),
                "run_exact": six(run_revenue),
                "share_exact": six(run_revenue * share),
            },
            "rate_cards": card_terms,
        }
        out.append(ComputedLine(run.owner, document, terms))
    return out


def _refuse_uncovered(run: Span, pieces: Sequence[Any], use: Any, revenue: Any) -> None:
    """Time no rate card covers is fine only with nothing to charge in it (rule 6)."""
    cursor = run[0]
    gaps: list[Span] = []
    for piece, _ in pieces:
        if piece[0] > cursor:
            gaps.append((cursor, piece[0]))
        cursor = max(cursor, piece[1])
    if cursor < run[1]:
        gaps.append((cursor, run[1]))
    for gap in gaps:
        u = use(gap)
        if u.in_service_s or u.energy_kwh or revenue(gap):
            raise RuleError(f"no rate card covers {z(gap[0])} to {z(gap[1])}, while in service")


def pool_part_fits(pool: dict[str, Any]) -> bool | None:
    """Rules 4 and 7: a GPU's pool part is the cluster's amount × its weight ÷ the weights
    of all the cluster's GPUs, rounded down to the cent or up by one cent (largest
    remainder). None when the statement does not record the amount and the total weight."""
    if pool["cluster_amount"] is None or pool["total_weight"] is None:
        return None
    amount = Fraction(Decimal(pool["cluster_amount"]))
    total = Fraction(Decimal(pool["total_weight"]))
    part = Fraction(Decimal(pool["gpu_part"]))
    if total == 0:
        return part == 0
    exact = abs(amount) * Fraction(Decimal(pool["gpu_weight"])) / total * 100
    low = Fraction(exact.numerator // exact.denominator, 100)
    return abs(part) in (low, low + Fraction(1, 100))


@dataclass(frozen=True)
class Recomputed:
    content: dict[str, Any]
    terms: list[dict[str, Any]]  # per content line


def recompute(frozen: dict[str, Any]) -> Recomputed:
    """Rule 8: the statement's canonical content from its frozen inputs alone."""
    period = (instant(frozen["period"][0]), instant(frozen["period"][1]))
    owner = frozen["owner_id"]
    found: list[ComputedLine] = []
    for entry in frozen["gpus"]:
        found += [line for line in gpu_lines(entry, period) if line.owner == owner]
    found.sort(key=lambda c: (c.document["serial"], c.document["starts_at"], c.document["gpu_id"]))
    lines = [c.document for c in found]
    lines_total = sum((Decimal(d["net"]) for d in lines), Decimal("0.00"))
    adjustments_total = sum((Decimal(a["amount"]) for a in frozen["adjustments"]), Decimal("0.00"))
    payouts_total = sum((Decimal(p["amount"]) for p in frozen["payouts"]), Decimal("0.00"))
    opening = Decimal(frozen["opening_balance"])
    content = {
        "owner_id": owner,
        "currency": frozen["currency"],
        "period": frozen["period"],
        "disclosure": frozen["disclosure"],
        "basis": BASIS,
        "opening_balance": str(cents(opening)),
        "lines": lines,
        "adjustments": frozen["adjustments"],
        "payouts": frozen["payouts"],
        "lines_total": str(cents(lines_total)),
        "adjustments_total": str(cents(adjustments_total)),
        "payouts_total": str(cents(payouts_total)),
        "closing_balance": str(cents(opening + lines_total + adjustments_total - payouts_total)),
    }
    return Recomputed(content=content, terms=[c.terms for c in found])

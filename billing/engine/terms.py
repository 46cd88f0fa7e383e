"""The terms behind each GPU line of a statement, derived from its frozen inputs.

A line's figures come from a few terms: where and when (the cluster, and the span the GPU was
in service there inside the owner's run), up seconds, each rental's rate and the up seconds
inside it, the pool part with its basis and weights, the share, and per rate card in force
the hosting fee, energy × PUE × price and the management percentage. They are all in the
statement's frozen inputs already; this module only reads them out, so showing them changes
nothing that is hashed, and a statement published before it shows its terms too.

``statement_terms`` answers, for each GPU line of the canonical content (in its order), the
terms as plain JSON-ready data: the same values every rendering (portal page, PDF, CSV, JSON,
API) shows, and what ``steward-verify`` recomputes independently.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from billing.engine.cells import CellUsage
from billing.engine.document import (
    SIX,
    gpu_inputs_from_frozen,
    iso,
    line_document,
    parse,
    rates_from_frozen,
)
from billing.engine.intervals import Interval, intersect
from billing.engine.money import money_context, round_cents
from billing.engine.statement import (
    FULL_BPS,
    GpuInputs,
    Line,
    PoolBasis,
    RateTerms,
    gpu_lines,
    pool_weight,
)
from billing.engine.usage import exact_decimal

SECONDS_PER_HOUR = 3600


def _six(value: Fraction | Decimal) -> str:
    exact = exact_decimal(value) if isinstance(value, Fraction) else value
    return str(exact.quantize(SIX, rounding=ROUND_HALF_EVEN))


def _span(cells: CellUsage, run: Interval) -> Interval:
    """The part of the run the GPU was in service in this cluster (first to last in-service
    second); the run itself when it was not in service there at all."""
    inside = [c.interval for c in cells.cells if c.in_service and intersect([c.interval], [run])]
    if not inside:
        return run
    return Interval(max(inside[0].start, run.start), min(inside[-1].end, run.end))


def _rentals(gpu: GpuInputs, run: Interval) -> list[dict[str, Any]]:
    out = []
    for rental in gpu.rentals:
        for piece in intersect([rental.interval], [run]):
            up = gpu.timeline.measure(piece).up_s
            out.append(
                {
                    "from": iso(piece.start),
                    "to": iso(piece.end),
                    "rate_per_gpu_hour": str(rental.rate_per_gpu_hour),
                    "up_s": up,
                    "amount": _six(Fraction(rental.rate_per_gpu_hour) * up / SECONDS_PER_HOUR),
                }
            )
    return out


def _pieces(
    gpu: GpuInputs, run: Interval, rates: list[RateTerms], period_s: int
) -> list[dict[str, Any]]:
    """Per rate card in force inside the run: what each cost is computed from."""
    out = []
    for terms in rates:
        for piece in intersect([run], [terms.interval]):
            m = gpu.timeline.measure(piece)
            waived = m.operator_incident_s if terms.waive_hosting_in_operator_incidents else 0
            waived_down = m.down_without_incident_s if terms.waive_hosting_when_down else 0
            out.append(
                {
                    "from": iso(piece.start),
                    "to": iso(piece.end),
                    "hosting_fee_per_gpu_month": str(terms.hosting_fee_per_gpu_month),
                    "in_service_s": m.in_service_s,
                    "waives_operator_incidents": terms.waive_hosting_in_operator_incidents,
                    "waived_incident_s": waived,
                    "waives_down": terms.waive_hosting_when_down,
                    "waived_down_s": waived_down,
                    "period_s": period_s,
                    "energy_kwh": str(m.energy_kwh),
                    "pue": str(terms.pue),
                    "price_per_kwh": str(terms.price_per_kwh),
                    "management_fee_pct": str(terms.management_fee_pct),
                }
            )
    return sorted(out, key=lambda p: p["from"])


def line_terms(
    *, period: Interval, entry: dict[str, Any], gpu: GpuInputs, line: Line
) -> dict[str, Any]:
    """The terms of one line (one owner's run of constant share of one GPU in one cluster)."""
    cells = gpu.timeline
    if not isinstance(cells, CellUsage):
        raise TypeError("a line's terms are read from its cells, not a minute timeline")
    basis = PoolBasis(entry["pool_basis"])
    whole = cells.measure(period)
    run = line.interval
    span = _span(cells, run)
    weight = pool_weight(whole, basis)
    run_weight = pool_weight(cells.measure(run), basis)
    pool_part = Decimal(entry["pool_cents"])
    rentals = _rentals(gpu, run)
    rental_exact = sum(
        (Fraction(r["rate_per_gpu_hour"]) * r["up_s"] / SECONDS_PER_HOUR for r in rentals),
        Fraction(0),
    )
    pool_exact = Fraction(pool_part) * Fraction(run_weight) / Fraction(weight) if weight else 0
    run_revenue = pool_exact + rental_exact
    all_rentals = sum(
        (
            Fraction(r.rate_per_gpu_hour) * cells.measure(p).up_s / SECONDS_PER_HOUR
            for r in gpu.rentals
            for p in intersect([r.interval], [period])
        ),
        Fraction(0),
    )
    with money_context():
        rental_cents = round_cents(exact_decimal(all_rentals))
    total_weight = entry.get("pool_total_weight")
    return {
        "cluster_id": entry["cluster_id"],
        "cluster_name": entry.get("cluster_name"),
        "span": [iso(span.start), iso(span.end)],
        "up_s": line.measure.up_s,
        "share": {"bps": line.share_bps, "from": iso(run.start), "to": iso(run.end)},
        "rentals": rentals,
        "pool": {
            "basis": str(basis),
            "cluster_amount": entry.get("pool_amount"),
            "gpu_weight": str(weight),
            "total_weight": None if total_weight is None else str(total_weight),
            "gpu_part": str(pool_part),
            "run_weight": str(run_weight),
        },
        "revenue": {
            "gpu_rentals": str(rental_cents),
            "gpu_total": str(pool_part + rental_cents),
            "run_exact": _six(run_revenue),
            "share_exact": _six(run_revenue * line.share_bps / FULL_BPS),
        },
        "rate_cards": _pieces(gpu, run, rates_from_frozen(entry), period.seconds),
    }


def statement_terms(frozen: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The terms of every GPU line of the statement, in the order of its canonical content
    (and of its stored lines); None when the frozen inputs hold no cells to read them from
    (a statement written by hand before cells were frozen)."""
    gpus = frozen.get("gpus")
    if gpus is None or any(not entry.get("cells") for entry in gpus):
        return None
    period = Interval(parse(frozen["period"][0]), parse(frozen["period"][1]))
    owner = frozen["owner_id"]
    found: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
    for entry in gpus:
        gpu = gpu_inputs_from_frozen(entry)
        result = gpu_lines(
            period=period,
            gpu=gpu,
            pool_cents=Decimal(entry["pool_cents"]),
            pool_basis=PoolBasis(entry["pool_basis"]),
            rates=rates_from_frozen(entry),
        )
        for line in result.lines:
            if line.owner != owner:
                continue
            d = line_document(line, entry["gpu_id"])
            key = (d["serial"], d["starts_at"], d["gpu_id"])
            found.append((key, line_terms(period=period, entry=entry, gpu=gpu, line=line)))
    # The content's order (``document``): a stable sort, so lines of one GPU with the same
    # start (a GPU that changed clusters) stay in the order of their clusters' entries.
    found.sort(key=lambda pair: pair[0])
    return [terms for _, terms in found]

"""A statement as a canonical document: its figures, its frozen inputs, and their hash.

``frozen`` holds everything one owner's statement is computed from — per GPU its cells, its
ownership slices, rentals, rate terms and its part of the cluster's pool (the pool split is
a cluster-wide result, frozen as an input) — plus adjustments, payouts, opening balance and
the disclosure. ``document_from_frozen`` recomputes the document from that alone, so the hash
of a published statement can be checked by anyone holding its frozen inputs.

Canonical JSON: keys sorted, no whitespace, UTF-8, decimals as strings with fixed places,
instants as ISO 8601 with ``Z``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from billing.engine.cells import Cell, CellUsage
from billing.engine.intervals import Interval
from billing.engine.money import half_even_div, money_context
from billing.engine.statement import (
    GpuInputs,
    Line,
    OwnershipSlice,
    PoolBasis,
    PoolTerms,
    RateTerms,
    Rental,
    gpu_lines,
)
from billing.engine.usage import Measure, exact_decimal
from core.instants import iso_z

SIX = Decimal("0.000001")
CENT = Decimal("0.01")

# What every statement says about its figures (Disclosures): gross vs net and the costs.
BASIS = {
    "gross": "the owner's share of the revenue the GPU earned (rentals and pool), before costs",
    "net": "gross minus hosting fee, power cost and management fee",
    "costs_included": ["hosting_fee", "power_cost", "management_fee"],
    "finality": "final once published; preliminary while a draft",
    "time_zone": "UTC",
}

# Next to every earnings figure (DESIGN, Disclosures).
NOT_GUARANTEED = (
    "Results are not guaranteed: they depend on utilization, uptime, demand, costs, hardware "
    "performance and market conditions, and can be zero."
)


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


# Cached: a close writes the same instants (period bounds, cuts) for every GPU.
iso = functools.lru_cache(maxsize=4096)(iso_z)


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


def ratio(value: Fraction | None) -> str | None:
    if value is None:
        return None
    return str(exact_decimal(value).quantize(SIX, rounding=ROUND_HALF_EVEN))


def ratio_of(numerator: int, denominator: int) -> str | None:
    """``ratio(Fraction(numerator, denominator))`` in integers (a line's availability and
    utilization): the exact quotient rounded half-even to 6 places, written as ``str`` of
    that Decimal writes it. None when not both ≥ 0 and the denominator > 0 (``ratio`` then)."""
    if numerator < 0 or denominator <= 0:
        return None
    whole, places = divmod(half_even_div(numerator * 1_000_000, denominator), 1_000_000)
    return f"{whole}.{places:06d}"


def _availability(m: Measure) -> str | None:
    denominator = m.in_service_s - m.maintenance_s
    if not denominator:
        return None
    return ratio_of(m.up_s, denominator) or ratio(m.availability)


def _utilization(m: Measure) -> str | None:
    if not m.up_s:
        return None
    busy_n, busy_d = m.busy_s.as_integer_ratio()
    return ratio_of(busy_n, busy_d * m.up_s) or ratio(m.utilization)


def six(value: Decimal) -> str:
    return str(value.quantize(SIX, rounding=ROUND_HALF_EVEN))


def cents(value: Decimal) -> str:
    return str(value.quantize(CENT))


def line_document(line: Line, gpu_id: str) -> dict[str, Any]:
    m = line.measure
    return {
        "gpu_id": gpu_id,
        "serial": line.gpu,
        "starts_at": iso(line.interval.start),
        "ends_at": iso(line.interval.end),
        "share_bps": line.share_bps,
        "in_service_s": m.in_service_s,
        "up_s": m.up_s,
        "down_s": m.down_s,
        "maintenance_s": m.maintenance_s,
        "no_data_s": m.no_data_s,
        "availability": _availability(m),
        "utilization": _utilization(m),
        "busy_gpu_hours": six(m.busy_gpu_hours),
        "energy_kwh": six(m.energy_kwh),
        "gross": cents(line.gross),
        "hosting_fee": cents(line.hosting_fee),
        "power_cost": cents(line.power_cost),
        "management_fee": cents(line.management_fee),
        "net": cents(line.net),
    }


def _frozen_head(
    *,
    gpu_id: str,
    gpu: GpuInputs,
    cluster_id: str,
    pool_basis: PoolBasis,
    pool_cents: Decimal,
    rates: Sequence[RateTerms],
    pool: PoolTerms | None = None,
    cluster_name: str | None = None,
) -> dict[str, Any]:
    """A GPU's frozen inputs up to its cells (which both forms below add in their own way)."""
    head = {
        "gpu_id": gpu_id,
        "serial": gpu.key,
        "cluster_id": cluster_id,
        "pool_basis": str(pool_basis),
        "pool_cents": cents(pool_cents),
        "rates": _rates_frozen(tuple(rates)),
        "ownership": [
            [iso(s.interval.start), iso(s.interval.end), dict(sorted(s.shares.items()))]
            for s in gpu.ownership
        ],
        "rentals": [
            [iso(r.interval.start), iso(r.interval.end), str(r.rate_per_gpu_hour)]
            for r in gpu.rentals
        ],
    }
    if cluster_name is not None:
        head["cluster_name"] = cluster_name  # as issued: the statement names it so
    if pool is not None:
        # What the pool part was split from: shown as a line's terms, not hashed.
        head["pool_amount"] = cents(pool.amount)
        head["pool_total_weight"] = str(pool.total_weight)
    return head


def _cells_of(gpu: GpuInputs) -> CellUsage:
    usage = gpu.timeline
    if not isinstance(usage, CellUsage):
        raise TypeError("frozen inputs are made from cells")
    return usage


def gpu_frozen(
    *,
    gpu_id: str,
    gpu: GpuInputs,
    cluster_id: str,
    pool_basis: PoolBasis,
    pool_cents: Decimal,
    rates: Sequence[RateTerms],
    pool: PoolTerms | None = None,
    cluster_name: str | None = None,
) -> dict[str, Any]:
    """A GPU's frozen inputs as a document (the reference ``gpu_frozen_json`` is tested on)."""
    head = _frozen_head(
        gpu_id=gpu_id,
        gpu=gpu,
        cluster_id=cluster_id,
        pool_basis=pool_basis,
        pool_cents=pool_cents,
        rates=rates,
        pool=pool,
        cluster_name=cluster_name,
    )
    return {**head, "cells": [cell.to_json() for cell in _cells_of(gpu).cells]}


def gpu_frozen_json(
    *,
    gpu_id: str,
    gpu: GpuInputs,
    cluster_id: str,
    pool_basis: PoolBasis,
    pool_cents: Decimal,
    rates: Sequence[RateTerms],
    events: list[list[object]],
    pool: PoolTerms | None = None,
    cluster_name: str | None = None,
) -> str:
    """``json.dumps({**gpu_frozen(…), "events": events})`` (default separators, ASCII), the
    same text built without the per-cell lists: most of a close's frozen inputs are cells."""
    cells = _cells_of(gpu).cells_json()
    head = json.dumps(
        _frozen_head(
            gpu_id=gpu_id,
            gpu=gpu,
            cluster_id=cluster_id,
            pool_basis=pool_basis,
            pool_cents=pool_cents,
            rates=rates,
            pool=pool,
            cluster_name=cluster_name,
        )
    )
    return f'{head[:-1]}, "cells": {cells}, "events": {json.dumps(events) if events else "[]"}}}'


@functools.lru_cache(maxsize=256)
def _rates_frozen(rates: tuple[RateTerms, ...]) -> list[dict[str, Any]]:
    """Rate cards as frozen (shared by every GPU of a cluster: only ever serialised)."""
    return [
        {
            "from": iso(t.interval.start),
            "to": iso(t.interval.end),
            "hosting_fee_per_gpu_month": str(t.hosting_fee_per_gpu_month),
            "price_per_kwh": str(t.price_per_kwh),
            "pue": str(t.pue),
            "management_fee_pct": str(t.management_fee_pct),
            "waive_hosting_in_operator_incidents": t.waive_hosting_in_operator_incidents,
            "waive_hosting_when_down": t.waive_hosting_when_down,
        }
        for t in rates
    ]


def gpu_inputs_from_frozen(entry: dict[str, Any]) -> GpuInputs:
    """One frozen GPU entry's usage (its cells), ownership and rentals."""
    return GpuInputs(
        key=entry["serial"],
        timeline=CellUsage([Cell.from_json(c) for c in entry["cells"]]),
        ownership=[
            OwnershipSlice(Interval(parse(a), parse(b)), shares)
            for a, b, shares in entry["ownership"]
        ],
        rentals=[
            Rental(Interval(parse(a), parse(b)), Decimal(rate)) for a, b, rate in entry["rentals"]
        ],
    )


def rates_from_frozen(entry: dict[str, Any]) -> list[RateTerms]:
    """The rate cards one frozen GPU entry was computed with."""
    return [
        RateTerms(
            interval=Interval(parse(r["from"]), parse(r["to"])),
            hosting_fee_per_gpu_month=Decimal(r["hosting_fee_per_gpu_month"]),
            price_per_kwh=Decimal(r["price_per_kwh"]),
            pue=Decimal(r["pue"]),
            management_fee_pct=Decimal(r["management_fee_pct"]),
            waive_hosting_in_operator_incidents=r["waive_hosting_in_operator_incidents"],
            # Statements frozen before the setting existed charged down time.
            waive_hosting_when_down=r.get("waive_hosting_when_down", False),
        )
        for r in entry["rates"]
    ]


def gpu_lines_from_frozen(period: Interval, entry: dict[str, Any]) -> list[Line]:
    result = gpu_lines(
        period=period,
        gpu=gpu_inputs_from_frozen(entry),
        pool_cents=Decimal(entry["pool_cents"]),
        pool_basis=PoolBasis(entry["pool_basis"]),
        rates=rates_from_frozen(entry),
    )
    return result.lines


def document(
    *,
    frozen: dict[str, Any],
    lines: list[dict[str, Any]],
) -> dict[str, Any]:
    """The statement's canonical content from its frozen header and its computed lines."""
    with money_context():
        lines = sorted(lines, key=lambda d: (d["serial"], d["starts_at"], d["gpu_id"]))
        lines_total = sum((Decimal(d["net"]) for d in lines), Decimal("0.00"))
        adjustments_total = sum(
            (Decimal(a["amount"]) for a in frozen["adjustments"]), Decimal("0.00")
        )
        payouts_total = sum((Decimal(p["amount"]) for p in frozen["payouts"]), Decimal("0.00"))
        opening = Decimal(frozen["opening_balance"])
        closing = opening + lines_total + adjustments_total - payouts_total
    return {
        "owner_id": frozen["owner_id"],
        "currency": frozen["currency"],
        "period": frozen["period"],
        "disclosure": frozen["disclosure"],
        "basis": BASIS,
        "opening_balance": cents(opening),
        "lines": lines,
        "adjustments": frozen["adjustments"],
        "payouts": frozen["payouts"],
        "lines_total": cents(lines_total),
        "adjustments_total": cents(adjustments_total),
        "payouts_total": cents(payouts_total),
        "closing_balance": cents(closing),
    }


def document_from_frozen(frozen: dict[str, Any]) -> dict[str, Any]:
    """Recomputes a statement from its frozen inputs alone."""
    period = Interval(parse(frozen["period"][0]), parse(frozen["period"][1]))
    owner = frozen["owner_id"]
    lines = []
    for entry in frozen["gpus"]:
        for line in gpu_lines_from_frozen(period, entry):
            if line.owner == owner:
                lines.append(line_document(line, entry["gpu_id"]))
    return document(frozen=frozen, lines=lines)

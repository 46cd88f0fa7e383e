"""Statement lines for one cluster and period, from plain inputs (rules 4–7).

The caller loads, for every GPU of the cluster, its timeline, ownership slices and rentals,
plus the cluster's pool amounts and rate cards; ``cluster_lines`` returns one line per
(owner, GPU, run of constant share) with every figure a statement shows, and the
operator's part of each GPU's revenue. Nothing here touches the database or a clock, and
all money is Decimal inside ``money_context()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Protocol

from billing.engine.intervals import Interval, intersect, subtract
from billing.engine.money import CENT, money_context, round_cents, split_largest_remainder
from billing.engine.usage import Measure
from core.instants import utc_text

FULL_BPS = 10_000
OPERATOR = "operator"


class PoolBasis(StrEnum):
    UP_SECONDS = "up_seconds"
    BUSY_GPU_HOURS = "busy_gpu_hours"


@dataclass(frozen=True)
class RateTerms:
    """One rate card, in force over ``interval``."""

    interval: Interval
    hosting_fee_per_gpu_month: Decimal
    price_per_kwh: Decimal
    pue: Decimal
    management_fee_pct: Decimal
    waive_hosting_in_operator_incidents: bool = False
    waive_hosting_when_down: bool = False  # down seconds no incident covers: charged by default

    def hosted_seconds(self, measure: Measure) -> int:
        """The in-service seconds the hosting fee is charged for under this card: all of
        them, less operator-incident seconds and down seconds with no incident where the card
        waives them (the two never overlap)."""
        charged = measure.in_service_s
        if self.waive_hosting_in_operator_incidents:
            charged -= measure.operator_incident_s
        if self.waive_hosting_when_down:
            charged -= measure.down_without_incident_s
        return charged


@dataclass(frozen=True)
class Rental:
    interval: Interval
    rate_per_gpu_hour: Decimal


@dataclass(frozen=True)
class OwnershipSlice:
    """Over ``interval`` the GPU's shares are exactly ``shares`` (owner key → bps)."""

    interval: Interval
    shares: Mapping[str, int]


class Usage(Protocol):
    """What a GPU did over an interval: ``GpuTimeline`` (from minutes, the reference) or
    ``CellUsage`` (pre-aggregated by the database) — they give identical measures."""

    def measure(self, window: Interval) -> Measure: ...


@dataclass
class GpuInputs:
    key: str  # sorts GPUs for the fixed tie-break (the serial)
    timeline: Usage
    ownership: Sequence[OwnershipSlice]
    rentals: Sequence[Rental] = ()


@dataclass(frozen=True)
class Line:
    owner: str
    gpu: str
    interval: Interval  # the run over which the owner held share_bps
    share_bps: int
    measure: Measure  # the GPU's figures over the run (not weighted by share)
    gross: Decimal
    hosting_fee: Decimal
    power_cost: Decimal
    management_fee: Decimal

    @property
    def net(self) -> Decimal:
        return self.gross - self.hosting_fee - self.power_cost - self.management_fee


@dataclass(frozen=True)
class GpuRevenue:
    gpu: str
    pool: Decimal
    rentals: Decimal
    operator_part: Decimal  # the revenue no owner's share covers

    @property
    def total(self) -> Decimal:
        return self.pool + self.rentals


@dataclass(frozen=True)
class ClusterResult:
    lines: list[Line]
    revenue: list[GpuRevenue]


@dataclass(frozen=True)
class _Run:
    owner: str
    interval: Interval
    share_bps: int


def _owner_runs(slices: Sequence[OwnershipSlice], period: Interval) -> list[_Run]:
    """Per owner, maximal stretches of constant share, clipped to the period."""
    if len(slices) == 1 and len(slices[0].shares) == 1:  # one owner throughout (most GPUs)
        ((owner, bps),) = slices[0].shares.items()
        return [_Run(owner, piece, bps) for piece in intersect([slices[0].interval], [period])]
    runs: list[_Run] = []
    for s in sorted(slices, key=lambda s: s.interval.start):
        for piece in intersect([s.interval], [period]):
            for owner, bps in sorted(s.shares.items()):
                previous = next((r for r in reversed(runs) if r.owner == owner), None)
                if (
                    previous is not None
                    and previous.share_bps == bps
                    and previous.interval.end == piece.start
                ):
                    runs[runs.index(previous)] = _Run(
                        owner, Interval(previous.interval.start, piece.end), bps
                    )
                else:
                    runs.append(_Run(owner, piece, bps))
    return sorted(runs, key=lambda r: (r.interval.start, r.owner))


def pool_weight(measure: Measure, basis: PoolBasis) -> Decimal | int:
    """A GPU's weight in its cluster's pool split: up seconds, or busy seconds (utilization ×
    up seconds; the same ratios as busy GPU-hours, without dividing by 3600)."""
    return measure.up_s if basis is PoolBasis.UP_SECONDS else measure.busy_s


def _basis(measure: Measure, basis: PoolBasis) -> Fraction:
    return Fraction(pool_weight(measure, basis))


def _rental_exact(gpu: GpuInputs, window: Interval) -> Fraction:
    total = Fraction(0)
    for rental in gpu.rentals:
        for piece in intersect([rental.interval], [window]):
            up = gpu.timeline.measure(piece).up_s
            total += Fraction(rental.rate_per_gpu_hour) * up / 3600
    return total


def _pieces(
    window: Interval, rates: Sequence[RateTerms]
) -> tuple[list[tuple[Interval, RateTerms]], list[Interval]]:
    """``window`` cut where the rate card in force changes, and the gaps no card covers."""
    if len(rates) == 1 and intersect([window], [rates[0].interval]) == [window]:
        return [(window, rates[0])], []  # one card in force over all of it (most GPUs)
    out: list[tuple[Interval, RateTerms]] = []
    for terms in rates:
        out.extend((piece, terms) for piece in intersect([window], [terms.interval]))
    gaps = subtract([window], [p for p, _ in out])
    return sorted(out, key=lambda pair: pair[0].start), gaps


def _uncharged_gap(gap: Interval, measure: Measure, revenue: Fraction) -> None:
    """A time no rate card covers is fine when there is nothing to charge in it: the GPU was
    not in service in the cluster, used no energy and earned nothing. Otherwise it is an
    error the operator must fix with a rate card."""
    if measure.in_service_s or measure.energy_kwh or revenue:
        raise ValueError(
            f"no rate card is in force from {utc_text(gap.start)} to {utc_text(gap.end)}, while "
            "the GPU was in service there; add a rate card that covers it"
        )


def cluster_lines(
    *,
    period: Interval,
    gpus: Sequence[GpuInputs],
    pool_amount: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
) -> ClusterResult:
    with money_context():
        return _cluster_lines(
            period, sorted(gpus, key=lambda g: g.key), pool_amount, pool_basis, rates
        )


def _cluster_lines(
    period: Interval,
    gpus: Sequence[GpuInputs],
    pool_amount: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
) -> ClusterResult:
    whole = {gpu.key: gpu.timeline.measure(period) for gpu in gpus}

    # Rule 4, pool: split over GPUs by basis, largest remainder, GPUs in key order.
    pool_by_gpu = {gpu.key: Decimal("0.00") for gpu in gpus}
    if pool_amount:
        weights = [(g.key, _decimal(_basis(whole[g.key], pool_basis))) for g in gpus]
        pool_by_gpu = split_largest_remainder(pool_amount, weights)

    lines: list[Line] = []
    revenue: list[GpuRevenue] = []
    for gpu in gpus:
        gpu_result = _gpu_lines(
            period, gpu, pool_by_gpu[gpu.key], pool_basis, rates, whole[gpu.key]
        )
        lines.extend(gpu_result.lines)
        revenue.extend(gpu_result.revenue)
    return ClusterResult(lines=lines, revenue=revenue)


def pool_split(
    *, period: Interval, gpus: Sequence[GpuInputs], pool_amount: Decimal, pool_basis: PoolBasis
) -> dict[str, Decimal]:
    """Rule 4's pool split alone: each GPU's part of the pool, in cents."""
    with money_context():
        ordered = sorted(gpus, key=lambda g: g.key)
        if not pool_amount:
            return {gpu.key: Decimal("0.00") for gpu in ordered}
        weights = [
            (g.key, _decimal(_basis(g.timeline.measure(period), pool_basis))) for g in ordered
        ]
        return split_largest_remainder(pool_amount, weights)


@dataclass(frozen=True)
class PoolTerms:
    """A cluster's pool for a period as split: the amount and the sum of all GPUs' weights."""

    amount: Decimal
    total_weight: Decimal | int


def pool_terms(
    *, period: Interval, gpus: Sequence[GpuInputs], pool_amount: Decimal, pool_basis: PoolBasis
) -> PoolTerms:
    """What ``pool_split`` divides: the amount, and the weights of all the cluster's GPUs
    summed (up seconds, or busy seconds), so a GPU's part can be checked from its own
    weight: it is amount × weight ÷ total weight, rounded down or up to the cent."""
    weights = [pool_weight(g.timeline.measure(period), pool_basis) for g in gpus]
    if pool_basis is PoolBasis.UP_SECONDS:
        return PoolTerms(pool_amount, sum(weights))
    return PoolTerms(pool_amount, sum(weights, Decimal(0)))


def gpu_lines(
    *,
    period: Interval,
    gpu: GpuInputs,
    pool_cents: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
    period_seconds: int | None = None,
) -> ClusterResult:
    """One GPU's lines, given its part of the cluster's pool (``pool_split``).

    ``cluster_lines`` is this for every GPU after the split; a statement's frozen inputs
    hold each GPU's pool part, so one owner's lines can be recomputed without the cluster.
    ``period_seconds`` is the length of the whole period the hosting fee is pro-rated over
    when ``period`` is only its part so far (a preliminary, period-to-date draft); by default
    the period is whole.
    """
    with money_context():
        return _gpu_lines(
            period,
            gpu,
            pool_cents,
            pool_basis,
            rates,
            gpu.timeline.measure(period),
            period_seconds,
        )


def _gpu_lines(
    period: Interval,
    gpu: GpuInputs,
    pool_cents: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
    whole: Measure,
    period_seconds: int | None = None,
) -> ClusterResult:
    runs = _owner_runs(gpu.ownership, period)
    if len(runs) == 1 and not gpu.rentals and pool_cents >= 0:
        single = _single_run_lines(
            period, gpu, runs[0], pool_cents, pool_basis, rates, whole, period_seconds
        )
        if single is not None:
            return single
    return _gpu_lines_exact(period, gpu, pool_cents, pool_basis, rates, whole, period_seconds, runs)


def _single_run_lines(
    period: Interval,
    gpu: GpuInputs,
    run: _Run,
    pool_cents: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
    whole: Measure,
    period_seconds: int | None,
) -> ClusterResult | None:
    """The common GPU — one owner holding all of it over the whole period, no rental, one
    rate card in force throughout — without rationals; None for any other GPU.

    The same figures as ``_gpu_lines_exact``, digit for digit: there the owner's exact
    revenue is the whole pool part (or nothing when the GPU has no basis), the operator's is
    0, so the split hands the owner exactly the GPU's total; and each cost is an exact
    rational turned into a 38-digit Decimal by one division, then rounded to the cent. Here
    each cost is the same rational as a quotient of integers (not reduced: a correctly
    rounded division depends only on the value), divided once and rounded the same way.
    """
    if run.share_bps != FULL_BPS or run.interval != period:
        return None
    pieces, gaps = _pieces(run.interval, rates)
    if len(pieces) != 1 or gaps:
        return None
    terms = pieces[0][1]
    rental_cents = round_cents(Decimal(0))
    total = pool_cents + rental_cents
    earned = bool(pool_cents) and bool(_basis(whole, pool_basis))  # the owner's weight ≠ 0
    gross = (int(total / CENT) * CENT) if total and earned else Decimal("0.00")

    fee_n, fee_d, pue_n, pue_d, price_n, price_d, pct_n, pct_d = _integer_terms(terms)
    period_s = period_seconds or int((period.end - period.start).total_seconds())
    charged_s = terms.hosted_seconds(whole)
    energy_n, energy_d = whole.energy_kwh.as_integer_ratio()
    gross_n, gross_d = gross.as_integer_ratio()
    line = Line(
        owner=run.owner,
        gpu=gpu.key,
        interval=run.interval,
        share_bps=run.share_bps,
        measure=whole,
        gross=gross,
        hosting_fee=round_cents(Decimal(fee_n * charged_s) / Decimal(fee_d * period_s)),
        power_cost=round_cents(
            Decimal(energy_n * pue_n * price_n) / Decimal(energy_d * pue_d * price_d)
        ),
        management_fee=round_cents(
            Decimal(gross_n * pct_n) / Decimal(gross_d * pct_d * 100) if earned else Decimal(0)
        ),
    )
    return ClusterResult(
        lines=[line], revenue=[GpuRevenue(gpu.key, pool_cents, rental_cents, Decimal("0.00"))]
    )


@functools.lru_cache(maxsize=1024)
def _integer_terms(terms: RateTerms) -> tuple[int, int, int, int, int, int, int, int]:
    """A rate card's figures as exact integer ratios (fee, PUE, price, management %)."""
    return (
        *terms.hosting_fee_per_gpu_month.as_integer_ratio(),
        *terms.pue.as_integer_ratio(),
        *terms.price_per_kwh.as_integer_ratio(),
        *terms.management_fee_pct.as_integer_ratio(),
    )


def _gpu_lines_exact(
    period: Interval,
    gpu: GpuInputs,
    pool_cents: Decimal,
    pool_basis: PoolBasis,
    rates: Sequence[RateTerms],
    whole: Measure,
    period_seconds: int | None = None,
    runs: list[_Run] | None = None,
) -> ClusterResult:
    """Rules 5–7 with exact rationals, for any GPU: the reference for the single-run path."""
    period_s = Fraction(period_seconds or int((period.end - period.start).total_seconds()))
    if runs is None:
        runs = _owner_runs(gpu.ownership, period)
    rental_cents = round_cents(_decimal(_rental_exact(gpu, period)))
    gpu_total = pool_cents + rental_cents
    basis_total = _basis(whole, pool_basis)
    pool_exact = Fraction(pool_cents)
    revenues: dict[Interval, Fraction] = {}  # the same windows are asked for repeatedly

    def exact_revenue(window: Interval) -> Fraction:
        known = revenues.get(window)
        if known is not None:
            return known
        pool_part = Fraction(0)
        if basis_total:
            measure = gpu.timeline.measure(window)
            pool_part = pool_exact * _basis(measure, pool_basis) / basis_total
        revenues[window] = revenue = pool_part + _rental_exact(gpu, window)
        return revenue

    # Rule 5: split the GPU's revenue over (owner runs…, operator) by the exact revenue
    # each would get; largest remainder keeps the parts equal to the whole to the cent.
    run_revenue = [exact_revenue(run.interval) for run in runs]
    run_weights = [
        rev * run.share_bps / FULL_BPS for rev, run in zip(run_revenue, runs, strict=True)
    ]
    operator_weight = exact_revenue(period) - sum(run_weights, Fraction(0))
    parties: list[tuple[int | str, Decimal]] = [(i, _decimal(w)) for i, w in enumerate(run_weights)]
    parties.append((OPERATOR, _decimal(max(operator_weight, Fraction(0)))))
    if gpu_total and any(weight for _, weight in parties):
        gross_parts = split_largest_remainder(gpu_total, parties)
    else:
        gross_parts = {key: Decimal("0.00") for key, _ in parties}
    revenue = GpuRevenue(gpu.key, pool_cents, rental_cents, gross_parts[OPERATOR])
    lines = [
        _line(gpu, run, gross_parts[index], rates, period_s, exact_revenue)
        for index, run in enumerate(runs)
    ]
    return ClusterResult(lines=lines, revenue=[revenue])


def _line(
    gpu: GpuInputs,
    run: _Run,
    gross: Decimal,
    rates: Sequence[RateTerms],
    period_s: Fraction,
    exact_revenue: Callable[[Interval], Fraction],
) -> Line:
    share = Fraction(run.share_bps, FULL_BPS)
    hosting = Fraction(0)
    power = Fraction(0)
    fee_weighted = Fraction(0)
    revenue_total = Fraction(0)
    pieces, gaps = _pieces(run.interval, rates)
    for gap in gaps:
        _uncharged_gap(gap, gpu.timeline.measure(gap), exact_revenue(gap))
    for piece, terms in pieces:
        measure = gpu.timeline.measure(piece)
        hosting_fee, pue, price_per_kwh, fee_pct = _exact_terms(terms)
        charged_s = terms.hosted_seconds(measure)
        # Rule 6: hosting pro-rated by owned in-service seconds × share over the period.
        hosting += hosting_fee * charged_s * share / period_s
        power += Fraction(measure.energy_kwh) * pue * price_per_kwh * share
        piece_revenue = exact_revenue(piece)
        fee_weighted += piece_revenue * fee_pct / 100
        revenue_total += piece_revenue
    # Management fee: the percentage in force, weighted by where the revenue was earned.
    fee_rate = fee_weighted / revenue_total if revenue_total else Fraction(0)
    return Line(
        owner=run.owner,
        gpu=gpu.key,
        interval=run.interval,
        share_bps=run.share_bps,
        measure=gpu.timeline.measure(run.interval),
        gross=gross,
        hosting_fee=round_cents(_decimal(hosting)),
        power_cost=round_cents(_decimal(power)),
        management_fee=round_cents(_decimal(Fraction(gross) * fee_rate)),
    )


@functools.lru_cache(maxsize=1024)
def _exact_terms(terms: RateTerms) -> tuple[Fraction, Fraction, Fraction, Fraction]:
    """A rate card's figures as exact rationals (converted once per card, not per line)."""
    return (
        Fraction(terms.hosting_fee_per_gpu_month),
        Fraction(terms.pue),
        Fraction(terms.price_per_kwh),
        Fraction(terms.management_fee_pct),
    )


def _decimal(value: Fraction) -> Decimal:
    """An exact rational as a Decimal with far more digits than a cent needs."""
    return Decimal(value.numerator) / Decimal(value.denominator)

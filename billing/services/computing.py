"""Computing every owner's statement of a period from the database (no writes).

Per cluster: load the GPUs' facts, aggregate their usage in SQL into cells (cut at every
ownership, rental, rate-card, in-service, maintenance and incident boundary), then, per
currency in which the cluster's owners are billed, split the pool and run the engine per
GPU. Revenue is never converted between currencies: revenue entered in a currency that a
holder of the GPU is not billed in is refused with the GPU and owner named.

A whole run can hand back each cluster's pool split (``splits``) for the close to freeze
(``billing.models.PoolSplit``). Recomputing some owners' drafts with ``reuse_split`` then
loads and measures only their GPUs, taking each GPU's part of the pool from the frozen split
— the work of those GPUs alone, not of their clusters — and refuses where the split no
longer holds for them (a ``ValidationError`` naming the cluster), or asks for more owners
where a GPU they hold or held changed hands since (``SplitNeedsOwners``: its co-holders
must be redrafted with them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from accounts.models import Disclosure, Owner
from billing.engine.cells import CellUsage
from billing.engine.document import document, gpu_frozen_json, iso, line_document, sha256_hex
from billing.engine.intervals import Interval
from billing.engine.money import money_context
from billing.engine.statement import (
    GpuInputs,
    OwnershipSlice,
    PoolBasis,
    PoolTerms,
    RateTerms,
    gpu_lines,
    pool_split,
    pool_terms,
    pool_weight,
)
from billing.models import (
    Period,
    PoolSplit,
    StatementLine,
)
from billing.selectors.facts import (
    GpuFacts,
    cluster_gpu_ids_many,
    gpu_facts_by_cluster,
    pool_amounts,
    pool_bases_in_force,
    rate_boundaries,
    rate_terms_many,
)
from billing.selectors.ledger import ledger_rows
from billing.selectors.usage import DaySums, cells_load_many
from fleet.models import Cluster, Gpu, Ownership, Placement
from telemetry.services.collector import collector_paused

StatementKey = tuple[str, str]  # (owner id, currency)


@dataclass
class Draft:
    owner_id: str
    currency: str
    gpu_lines: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)  # each GPU's frozen inputs as JSON text
    # The frozen inputs as JSON text, exactly ``json.dumps(self.frozen)``: what is stored.
    frozen_json: str = "{}"
    content: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""

    @functools.cached_property
    def frozen(self) -> dict[str, Any]:
        """The frozen inputs (parsed on demand: a close only writes their text)."""
        value: dict[str, Any] = json.loads(self.frozen_json)
        return value


def clusters_in(window: Interval, owner_ids: Collection[str] | None = None) -> list[uuid.UUID]:
    """Clusters with a GPU placed in them during ``window``; with ``owner_ids``, only those
    where one of these owners held a share of such a GPU during the window."""
    placed = Placement.objects.filter(valid_from__lt=window.end).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=window.start)
    )
    if owner_ids is not None:
        held = Ownership.objects.filter(
            gpu_id=OuterRef("gpu_id"),
            owner_id__in=list(owner_ids),
            valid_from__lt=window.end,
        ).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=window.start))
        placed = placed.filter(Exists(held))
    return list(
        placed.values_list("node__cluster_id", flat=True).distinct().order_by("node__cluster_id")
    )


@dataclass
class ClusterFacts:
    """What one cluster's lines are computed from, before usage is loaded."""

    cluster: Cluster
    facts: list[GpuFacts]
    currency_of: dict[str, str]
    pools: dict[str, Decimal]
    basis: PoolBasis
    currencies: list[str]
    terms: dict[str, list[RateTerms]]
    cuts: set[datetime]


def day_boundaries(window: Interval) -> set[datetime]:
    """Every UTC midnight strictly inside ``window``."""
    day = window.start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    cuts = set()
    while day < window.end:
        cuts.add(day)
        day += timedelta(days=1)
    return cuts


def cluster_facts(period: Period, window: Interval, cluster_id: uuid.UUID) -> ClusterFacts | None:
    """What one cluster's lines are computed from; None when no GPU was placed in it."""
    prepared = clusters_facts(period, window, [cluster_id])
    return prepared[0] if prepared else None


def clusters_facts(
    period: Period, window: Interval, cluster_ids: Sequence[uuid.UUID]
) -> list[ClusterFacts]:
    """``cluster_facts`` of each of these clusters that had a GPU placed in it during
    ``window``, in the order given, from one set of queries for all of them (a close's facts,
    rate cards, holders and pools read once, not once per cluster)."""
    gpus_in: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for cluster_id, gpu_id in cluster_gpu_ids_many(
        cluster_ids=cluster_ids, start=window.start, end=window.end
    ):
        gpus_in[cluster_id].append(gpu_id)
    if not gpus_in:
        return []
    facts = gpu_facts_by_cluster(gpu_ids=gpus_in, start=window.start, end=window.end)
    currency_of = _currencies_of([f for listed in facts.values() for f in listed])
    holders = {c: {o: currency_of[o] for f in facts[c] for o in f.owner_ids()} for c in gpus_in}
    terms = rate_terms_many(
        keys=[(c, currency) for c, held in holders.items() for currency in set(held.values())],
        start=window.start,
        end=window.end,
    )
    pools = pool_amounts(period_id=period.pk, cluster_ids=gpus_in)
    bases = pool_bases_in_force(cluster_ids=list(gpus_in), at=period.start)
    clusters = Cluster.objects.in_bulk(list(gpus_in))
    prepared = []
    for cluster_id in cluster_ids:
        if cluster_id not in gpus_in:
            continue
        currencies = sorted(set(holders[cluster_id].values()))
        prepared.append(
            _prepared(
                period,
                window,
                clusters[cluster_id],
                facts[cluster_id],
                holders[cluster_id],
                pools[cluster_id],
                basis=bases[cluster_id],
                currencies=currencies,
                terms={c: terms[cluster_id, c] for c in currencies},
            )
        )
    return prepared


def _currencies_of(facts: Collection[GpuFacts]) -> dict[str, str]:
    """Each holder of these GPUs (owner id as text) → the currency they are billed in."""
    holders = sorted({owner for f in facts for owner in f.owner_ids()})
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id::text, billing_currency FROM {Owner._meta.db_table}"  # noqa: S608
            " WHERE id = ANY(%s::uuid[])",
            [holders],
        )
        return dict(cursor.fetchall())


def _prepared(
    period: Period,
    window: Interval,
    cluster: Cluster,
    facts: list[GpuFacts],
    currency_of: dict[str, str],
    pools: dict[str, Decimal],
    *,
    basis: PoolBasis,
    currencies: list[str],
    terms: dict[str, list[RateTerms]],
) -> ClusterFacts:
    """The cluster's facts checked (no revenue lost to a currency) and cut (``terms``: the
    rate cards of each currency)."""
    # Revenue in a currency some holder of the GPU is not billed in would be lost to them.
    for fact in facts:
        revenue_currencies = {c for c, _ in fact.rentals} | {c for c, a in pools.items() if a}
        for currency in sorted(revenue_currencies):
            strangers = sorted(o for o in fact.owner_ids() if currency_of[o] != currency)
            if strangers:
                stranger = Owner.objects.get(pk=strangers[0])
                raise ValidationError(
                    {
                        "currency": f"GPU {fact.serial} in cluster {cluster} earned {currency} "
                        f"revenue in {period}, but its co-owner {stranger} is billed in "
                        f"{stranger.billing_currency}; Steward converts no currencies — enter "
                        f"that revenue in {stranger.billing_currency}."
                    }
                )

    cuts = set().union(*(rate_boundaries(t, window) for t in terms.values()))
    # Cells also end at every UTC midnight, so a statement's frozen inputs answer for each day
    # (the daily series of its report). Midnights are hour boundaries: the figures are unchanged.
    cuts |= day_boundaries(window)
    return ClusterFacts(cluster, facts, currency_of, pools, basis, currencies, terms, cuts)


def _redraft_facts(
    period: Period, window: Interval, owner_ids: Collection[str]
) -> tuple[list[ClusterFacts], dict[tuple[uuid.UUID, str], PoolSplit]]:
    """``cluster_facts`` for redrafting these owners with the frozen splits, and the splits
    (each GPU's part only for these GPUs): of each cluster where they held a GPU, only the
    GPUs they held, in a few queries for all the clusters. The currencies (whose rate cards
    cut every GPU's cells) and the pool basis are the split's: those the whole run cut the
    cluster's cells by (a basis cannot change while a period is closing, nor a rate card or
    pool reaching it)."""
    held = Ownership.objects.filter(
        gpu_id=OuterRef("gpu_id"), owner_id__in=list(owner_ids), valid_from__lt=window.end
    ).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=window.start))
    gpus_in: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for cluster_id, gpu_id in (
        Placement.objects.filter(valid_from__lt=window.end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=window.start))
        .filter(Exists(held))
        .values_list("node__cluster_id", "gpu_id")
        .distinct()
        .order_by("node__cluster_id", "gpu_id")
    ):
        gpus_in[cluster_id].append(gpu_id)
    clusters = Cluster.objects.in_bulk(list(gpus_in))
    # The GPUs they hold now, and those their drafts have lines for (as the last run or
    # redraft wrote them): a GPU they held then and no longer hold is among the latter.
    drafted = StatementLine.objects.filter(
        statement__period_id=period.pk,
        statement__owner_id__in=list(owner_ids),
        gpu_id__isnull=False,
    ).values_list("gpu_id", flat=True)
    holding = {g for ids in gpus_in.values() for g in ids}
    gone = set(drafted) - holding
    # The splits of their clusters, and of any cluster a GPU they no longer hold was ever in.
    split_clusters = set(gpus_in) | set(
        Placement.objects.filter(gpu_id__in=list(gone)).values_list("node__cluster_id", flat=True)
        if gone
        else ()
    )
    splits = _splits_of(period, holding | gone, split_clusters)
    pools = pool_amounts(period_id=period.pk, cluster_ids=gpus_in)
    facts = gpu_facts_by_cluster(gpu_ids=gpus_in, start=window.start, end=window.end)
    currency_of = _currencies_of([f for listed in facts.values() for f in listed])
    for cluster_id in gpus_in:
        if not any(c_id == cluster_id for c_id, _ in splits):
            raise _split_refusal(
                clusters[cluster_id],
                period,
                "no whole run of the close has split its pool since the close started",
            )
    terms = rate_terms_many(
        keys=[key for key in splits if key[0] in gpus_in], start=window.start, end=window.end
    )
    prepared = []
    for cluster_id in sorted(gpus_in):
        cluster = clusters[cluster_id]
        frozen = sorted((c, split) for (c_id, c), split in splits.items() if c_id == cluster_id)
        prepared.append(
            _prepared(
                period,
                window,
                cluster,
                facts[cluster_id],
                {o: currency_of[o] for f in facts[cluster_id] for o in f.owner_ids()},
                pools[cluster_id],
                basis=PoolBasis(frozen[0][1].pool_basis),
                currencies=[c for c, _ in frozen],
                terms={c: terms[cluster_id, c] for c, _ in frozen},
            )
        )
    _holdings_check(period, window, prepared, splits, set(owner_ids))
    return prepared, splits


class SplitNeedsOwners(ValidationError):
    """A redraft must take these owners too: a GPU they hold or held with the owners being
    redrafted changed hands since the split (``owners``: their ids)."""

    def __init__(self, owners: set[str]) -> None:
        super().__init__(
            {
                "period": f"{len(owners)} more owner(s) hold or held GPUs whose holdings "
                "changed since the pool was split; recompute them together."
            }
        )
        self.owners = owners


def holdings_digest(fact: GpuFacts) -> str:
    """A GPU's ownership slices in the window, as a short digest: who held what share when,
    which every holder's lines of the GPU are split by."""
    slices = [
        [iso(s.interval.start), iso(s.interval.end), dict(sorted(s.shares.items()))]
        for s in fact.ownership
    ]
    return hashlib.sha256(json.dumps(slices).encode()).hexdigest()[:32]


def _holdings_check(
    period: Period,
    window: Interval,
    prepared: list[ClusterFacts],
    splits: dict[tuple[uuid.UUID, str], PoolSplit],
    owners: set[str],
) -> None:
    """Refuses a redraft that would leave another owner's draft behind: a GPU of the split
    that the owners hold now or held then, whose holdings changed since, must be redrafted
    with every holder it had then and has now (``SplitNeedsOwners``); and one the owners held
    then that is in none of their facts now must still be held, and placed in the cluster."""
    facts = {(p.cluster.pk, f.gpu_id): f for p in prepared for f in p.facts}
    needed: set[str] = set()
    gone: dict[uuid.UUID, tuple[uuid.UUID, set[str]]] = {}
    for (cluster_id, _), split in splits.items():
        for key, (_, _, held, digest) in split.parts.items():
            fact = facts.get((cluster_id, uuid.UUID(key)))
            if fact is not None:
                if holdings_digest(fact) != digest:
                    needed |= set(held) | fact.owner_ids()
            elif owners & set(held):
                gone[uuid.UUID(key)] = (cluster_id, set(held))
    if gone:
        now: dict[uuid.UUID, set[str]] = defaultdict(set)
        for gpu_id, owner_id in _holding(gone, window).values_list("gpu_id", "owner_id"):
            now[gpu_id].add(str(owner_id))
        for gpu_id, (cluster_id, held) in sorted(gone.items()):
            holders = held | now[gpu_id]
            if holders <= owners:  # redrafted with all its holders, yet not in the cluster
                raise _split_refusal(
                    Cluster.objects.get(pk=cluster_id),
                    period,
                    f"GPU {Gpu.objects.get(pk=gpu_id).serial} was in it when the pool was "
                    "split, and is no longer, or is held by no one",
                )
            needed |= holders
    if needed - owners:
        raise SplitNeedsOwners(needed - owners)


def _holding(gpu_ids: Collection[uuid.UUID], window: Interval) -> Any:
    """Shares of these GPUs held at some time in the window (a fact's ownership slices)."""
    return Ownership.objects.filter(gpu_id__in=list(gpu_ids), valid_from__lt=window.end).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=window.start)
    )


# Some clusters' frozen splits, with each GPU's part only for the GPUs asked about: a split
# holds every GPU of its cluster (~100 KB of parts for 1,000 GPUs), picked in the database.
_SPLITS_OF = f"""
SELECT s.id, s.cluster_id, s.currency, s.pool_basis, s.amount, s.total_weight, s.computed_at,
       (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{{}}'::jsonb)
          FROM jsonb_each(s.parts) AS e
         WHERE e.key = ANY(%(gpus)s::text[]))
  FROM {PoolSplit._meta.db_table} s
 WHERE s.period_id = %(period)s AND s.cluster_id = ANY(%(clusters)s::uuid[])
"""  # noqa: S608 - the table name from the model


def _splits_of(
    period: Period, gpu_ids: Collection[uuid.UUID], cluster_ids: Collection[uuid.UUID]
) -> dict[tuple[uuid.UUID, str], PoolSplit]:
    with connection.cursor() as cursor:
        cursor.execute(
            _SPLITS_OF,
            {
                "period": period.pk,
                "gpus": [str(g) for g in gpu_ids],
                "clusters": [str(c) for c in cluster_ids],
            },
        )
        return {
            (cluster_id, currency): PoolSplit(
                id=split_id,
                period_id=period.pk,
                cluster_id=cluster_id,
                currency=currency,
                pool_basis=basis,
                amount=amount,
                total_weight=total_weight,
                parts=json.loads(parts),  # Django's connection hands jsonb over as text
                computed_at=computed_at,
            )
            for split_id, cluster_id, currency, basis, amount, total_weight, computed_at, parts in (
                cursor.fetchall()
            )
        }


def _cluster_lines(
    period: Period,
    window: Interval,
    prepared: ClusterFacts,
    usage: dict[uuid.UUID, CellUsage],
    drafts: dict[StatementKey, Draft],
    *,
    frozen: dict[str, PoolSplit] | None = None,
    splits: list[PoolSplit] | None = None,
) -> None:
    """The cluster's lines into ``drafts``. ``frozen``: the pool split per currency, taken
    as a whole run froze it (``prepared`` may then hold only some GPUs); otherwise the pool
    is split here over all the cluster's GPUs, and each split is added to ``splits``."""
    period_seconds = int((period.end - period.start).total_seconds())
    cluster, facts, currency_of = prepared.cluster, prepared.facts, prepared.currency_of
    cluster_id, basis, terms = cluster.pk, prepared.basis, prepared.terms
    cluster_key = str(cluster_id)
    for currency in prepared.currencies:
        inputs = []
        for fact in facts:
            ownership = [
                OwnershipSlice(
                    s.interval,
                    {o: bps for o, bps in s.shares.items() if currency_of[o] == currency},
                )
                for s in fact.ownership
            ]
            inputs.append(
                (
                    fact,
                    GpuInputs(
                        key=fact.serial,
                        timeline=usage[fact.gpu_id],
                        ownership=[s for s in ownership if s.shares],
                        rentals=[r for c, r in fact.rentals if c == currency],
                    ),
                )
            )
        pool_amount = prepared.pools.get(currency) or Decimal("0.00")
        if frozen is not None:
            split = frozen[currency]
            parts = {fact.serial: Decimal(split.parts[str(fact.gpu_id)][1]) for fact, _ in inputs}
            pool = PoolTerms(split.amount, _weight_of_text(split.total_weight, basis))
        else:
            try:
                parts = pool_split(
                    period=window,
                    gpus=[g for _, g in inputs],
                    pool_amount=pool_amount,
                    pool_basis=basis,
                )
            except ValueError as exc:  # every GPU's weight is zero: nothing to split it by
                measured = "up time" if basis == PoolBasis.UP_SECONDS else "busy GPU-hours"
                raise ValidationError(
                    {
                        "pool": f"The {currency} {pool_amount} pool of cluster "
                        f"{prepared.cluster} in {period} cannot be split: no GPU of the cluster "
                        f"has any {measured} in the period to split it by. Correct or remove "
                        "the pool entry."
                    }
                ) from exc
            # What each GPU's part was split from, frozen to show as its lines' terms.
            pool = pool_terms(
                period=window,
                gpus=[g for _, g in inputs],
                pool_amount=pool_amount,
                pool_basis=basis,
            )
            if splits is not None:
                splits.append(
                    PoolSplit(
                        period_id=period.pk,
                        cluster_id=cluster_id,
                        currency=currency,
                        pool_basis=str(basis),
                        amount=pool_amount,
                        total_weight=str(pool.total_weight),
                        parts={
                            str(fact.gpu_id): [
                                gpu_weight(usage[fact.gpu_id], window, basis),
                                str(parts[gpu.key]),
                                sorted(fact.owner_ids()),
                                holdings_digest(fact),
                            ]
                            for fact, gpu in inputs
                        },
                        computed_at=timezone.now(),
                    )
                )
        for fact, gpu in inputs:
            if not gpu.ownership:
                continue  # no owner billed in this currency: the operator's alone
            try:
                result = gpu_lines(
                    period=window,
                    gpu=gpu,
                    pool_cents=parts[gpu.key],
                    pool_basis=basis,
                    rates=terms[currency],
                    period_seconds=period_seconds,
                )
            except ValueError as exc:
                raise ValidationError(
                    {"rate_card": f"Cluster {cluster}, {currency}, GPU {fact.serial}: {exc}."}
                ) from exc
            gpu_id = str(fact.gpu_id)
            frozen_gpu = gpu_frozen_json(
                gpu_id=gpu_id,
                gpu=gpu,
                cluster_id=cluster_key,
                pool_basis=basis,
                pool_cents=parts[gpu.key],
                rates=terms[currency],
                # Not part of the figures: what the statement's report lists for the period.
                events=fact.events,
                pool=pool,
                cluster_name=cluster.name,
            )
            owners_here = set()
            for line in result.lines:
                draft = drafts.get((line.owner, currency))
                if draft is None:
                    draft = drafts[line.owner, currency] = Draft(line.owner, currency)
                draft.gpu_lines.append(line_document(line, gpu_id))
                owners_here.add(line.owner)
            for owner in sorted(owners_here):
                drafts[owner, currency].gpus.append(frozen_gpu)


def gpu_weight(usage: CellUsage, window: Interval, basis: PoolBasis) -> str:
    """A GPU's ``pool_weight`` as the split is frozen (text). Measured in the money context,
    as ``pool_split`` first measures it in a whole run (a measure is kept once computed)."""
    with money_context():
        return str(pool_weight(usage.measure(window), basis))


def _weight_of_text(text: str, basis: PoolBasis) -> Decimal | int:
    return int(text) if basis is PoolBasis.UP_SECONDS else Decimal(text)


def _frozen_splits(
    period: Period,
    window: Interval,
    prepared: ClusterFacts,
    usage: dict[uuid.UUID, CellUsage],
    splits: dict[tuple[uuid.UUID, str], PoolSplit],
) -> dict[str, PoolSplit]:
    """The cluster's frozen split per currency, after checking that it still holds for the
    GPUs of ``prepared``: their holders billed in the split's currencies, the same pool
    amounts, and each GPU in the split, weighing what it weighed. (Another GPU is taken as
    the run froze it: the other owners' drafts were written with the same split.)"""
    cluster, basis = prepared.cluster, prepared.basis
    frozen = {c: split for (cluster_id, c), split in splits.items() if cluster_id == cluster.pk}
    billed = sorted(set(prepared.currency_of.values()) - set(frozen))
    if billed:
        raise _split_refusal(cluster, period, f"one of its owners is billed in {billed[0]} now")
    for currency, split in sorted(frozen.items()):
        amount = prepared.pools.get(currency) or Decimal("0.00")
        if split.amount != amount:
            raise _split_refusal(
                cluster, period, f"its {currency} pool is {amount} now, split as {split.amount}"
            )
        for fact in prepared.facts:
            then = split.parts.get(str(fact.gpu_id))
            if then is None:
                raise _split_refusal(
                    cluster, period, f"GPU {fact.serial} was not in it when the pool was split"
                )
            now = gpu_weight(usage[fact.gpu_id], window, basis)
            if now != then[0]:
                raise _split_refusal(
                    cluster,
                    period,
                    f"GPU {fact.serial} weighs {now} now, split as weighing {then[0]}",
                )
    return frozen


def _split_refusal(cluster: Cluster, period: Period, why: str) -> ValidationError:
    return ValidationError(
        {
            "period": f"The pool split of cluster {cluster} in {period} no longer holds for "
            f"these drafts ({why}); recompute the whole period instead."
        }
    )


def statements_compute(
    *,
    period: Period,
    disclosure: Disclosure,
    owner_ids: Collection[str] | None = None,
    until: datetime | None = None,
    reuse_split: bool = False,
    splits: list[PoolSplit] | None = None,
) -> dict[StatementKey, Draft]:
    """Every statement the period should have, with frozen inputs, content and hash.

    Writes nothing. ``owner_ids`` limits the work to the clusters where these owners held
    GPUs and the result to their statements (each cluster is still computed whole, so a pool
    is split over all its GPUs). ``until`` computes the period only up to that instant — a
    preliminary, period-to-date draft: figures so far, the hosting fee still pro-rated over
    the whole period's seconds; its content is not a statement's and is never stored.
    ``period`` may be unsaved (a month no one has opened yet: no pool, no adjustments).

    ``reuse_split`` (with ``owner_ids``, for a whole period): only these owners' GPUs are
    loaded and measured, and each one's part of its cluster's pool is taken from the split the
    period's last whole run froze (``PoolSplit``); a ``ValidationError`` says which cluster's
    split no longer holds, and ``SplitNeedsOwners`` which co-holders must be redrafted with
    them. ``splits`` (a whole run): each cluster's split is added to it.
    """
    if reuse_split and (owner_ids is None or until is not None):
        raise ValueError("reuse_split recomputes some owners' drafts of a whole period")
    with collector_paused():
        return _statements_compute(period, disclosure, owner_ids, until, reuse_split, splits)


def _statements_compute(
    period: Period,
    disclosure: Disclosure,
    owner_ids: Collection[str] | None,
    until: datetime | None,
    reuse_split: bool,
    splits: list[PoolSplit] | None,
) -> dict[StatementKey, Draft]:
    window = Interval(period.start, period.end if until is None else min(until, period.end))
    drafts: dict[StatementKey, Draft] = {}
    frozen: dict[tuple[uuid.UUID, str], PoolSplit] = {}
    # The whole fleet's rollups summed per day, on a second connection while the facts load
    # and the cells are cut (outside a transaction only; for a few owners, per cell instead).
    day_sums = DaySums.start(window) if owner_ids is None else None
    try:
        if reuse_split and owner_ids is not None:  # (checked above; narrows the type)
            prepared, frozen = _redraft_facts(period, window, owner_ids)
        else:
            prepared = clusters_facts(period, window, clusters_in(window, owner_ids))
        # One pass over the rollups for every cluster (per cluster, each would scan them again).
        usages = cells_load_many(
            groups=[(p.facts, {f.gpu_id: p.cuts for f in p.facts}) for p in prepared],
            day_sums=day_sums,
        )
    finally:
        if day_sums is not None:
            day_sums.wait()
    for p, usage in zip(prepared, usages, strict=True):
        split = _frozen_splits(period, window, p, usage, frozen) if reuse_split else None
        kept = splits if owner_ids is None and until is None else None
        _cluster_lines(period, window, p, usage, drafts, frozen=split, splits=kept)

    # Only the wanted owners' rows, where some are wanted (the others' are dropped below).
    ledger = ledger_rows(
        period_id=period.pk,
        start=period.start,
        paid_from=window.start.date(),
        paid_to=window.end.date(),
        owner_ids=owner_ids,
        names_of=owner_ids or (),
    )
    adjustments: dict[StatementKey, list[dict[str, Any]]] = defaultdict(list)
    for pk, owner, currency, amount, reason, source, statement_id, line_id in ledger.adjustments:
        adjustments[str(owner), currency].append(
            {
                "id": pk,
                "amount": str(amount),
                "reason": reason,
                "source": source,
                "corrects_statement": str(statement_id) if statement_id else None,
                "corrects_line": line_id,
            }
        )
    payouts: dict[StatementKey, list[dict[str, Any]]] = defaultdict(list)
    for owner, currency, reference, amount, paid_on in ledger.payouts:
        payouts[str(owner), currency].append(
            {"reference": reference, "amount": str(amount), "paid_on": paid_on.isoformat()}
        )
    openings = ledger.openings

    keys = set(drafts) | set(adjustments) | set(payouts)
    keys |= {k for k, (balance, _) in openings.items() if balance != 0}
    if owner_ids is not None:
        wanted = set(owner_ids)
        keys = {k for k in keys if k[0] in wanted}
        drafts = {k: d for k, d in drafts.items() if k[0] in wanted}
    names = ledger.names or dict(
        Owner.objects.filter(pk__in={k[0] for k in keys}).values_list("pk", "legal_name")
    )
    for key in sorted(keys):
        draft = drafts.setdefault(key, Draft(owner_id=key[0], currency=key[1]))
        opening, opened_from = openings.get(key, (Decimal("0.00"), None))
        header = {
            "owner_id": key[0],
            # As issued: the report shows this name even if the account is renamed later.
            "owner_name": names[owner_uuid(key[0])],
            "currency": key[1],
            "period": [iso(window.start), iso(window.end)],
            "disclosure": {"version": disclosure.version, "sha256": disclosure.text_sha256},
            "opening_balance": str(opening),
            "opening_from_statement": opened_from,
            "adjustments": adjustments.get(key, []),
            "payouts": payouts.get(key, []),
        }
        # json.dumps({**header, "gpus": [...]}) with each GPU's text as it was built.
        gpus = ", ".join(draft.gpus)
        draft.frozen_json = f'{json.dumps(header)[:-1]}, "gpus": [{gpus}]}}'
        draft.content = document(frozen=header, lines=draft.gpu_lines)
        draft.sha256 = sha256_hex(draft.content)
    return drafts


def owner_uuid(key: str) -> uuid.UUID:
    return uuid.UUID(key)

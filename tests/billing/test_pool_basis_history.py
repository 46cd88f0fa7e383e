"""Issue 21, defect 3: a cluster's pool basis is effective-dated, so changing it never
rewrites a period already computed.

``cluster_pool_basis_set`` used to overwrite one undated setting, and reconciliation then
recomputed closed periods with today's basis: a change after a close turned into
adjustments for a period whose pool had been split correctly."""

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from accounts.models import Owner
from billing.models import Adjustment, ClusterBilling, Period, Statement
from billing.selectors.facts import pool_basis_in_force
from billing.services.closing import period_close, period_close_finish
from billing.services.computing import statements_compute
from billing.services.periods import period_for_month
from billing.services.reconciliation import period_reconcile
from billing.services.revenue import cluster_pool_basis_set, pool_add
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
D = Decimal
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
APRIL_START = MARCH[1]
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def march_closed(oscar, olga, disclosure):
    """Two GPUs of one cluster up all March, SN-1 at 50 % and SN-2 at 80 % (so the bases
    split a pool differently), a 300.00 EUR pool split by up seconds (no basis set: the
    default), March closed and published; both up for April's first two hours."""
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    s.own(sn1, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.own(sn2, s.owner("Bob Chen"), 10_000, s.EPOCH)
    s.card(f, oscar)
    until = APRIL_START + dt.timedelta(hours=2)
    s.windows(sn1, MARCH[0] - MINUTE, until, node=f.node, util=50.0)
    s.windows(sn2, MARCH[0] - MINUTE, until, node=f.node, util=80.0)
    s.rebuild(MARCH[0], until)
    march = period_for_month(year=2026, month=3)
    pool_add(
        cluster=f.cluster,
        period=march,
        amount=D("300.00"),
        currency="EUR",
        description="",
        by=oscar,
    )
    period_close(period=march, by=oscar)
    s.publish_all(march, oscar, olga)
    period_close_finish(period=march, by=oscar)
    return {"fleet": f, "march": march}


def _pool_parts(frozen: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(g["serial"], g["pool_basis"], g["pool_cents"]) for g in frozen["gpus"]]


def test_a_basis_change_after_a_close_leaves_that_period_alone(
    march_closed, oscar, olga, disclosure
):
    cluster, march = march_closed["fleet"].cluster, march_closed["march"]
    published = {
        st.owner.legal_name: _pool_parts(st.frozen_inputs)
        for st in Statement.objects.filter(period=march).select_related("owner")
    }
    assert published == {
        "Alice Compute Ltd": [("SN-1", "up_seconds", "150.00")],
        "Bob Chen": [("SN-2", "up_seconds", "150.00")],
    }

    change = cluster_pool_basis_set(
        cluster=cluster,
        basis="busy_gpu_hours",
        effective_from=APRIL_START,
        reason="the marketplace pays by busy hours",
        by=oscar,
    )
    assert (change.created_by, change.reason) == (oscar, "the marketplace pays by busy hours")
    assert pool_basis_in_force(cluster_id=cluster.pk, at=march.start) == "up_seconds"
    assert pool_basis_in_force(cluster_id=cluster.pk, at=APRIL_START) == "busy_gpu_hours"

    # Reconciling March recomputes it with the basis it was computed with: nothing differs.
    assert period_reconcile(period=march, by=oscar).added == []
    assert not Adjustment.objects.exists()

    # April is split by the new basis: 10.00 × 50/130 and × 80/130, largest remainder.
    april = period_for_month(year=2026, month=4)
    pool_add(
        cluster=cluster, period=april, amount=D("10.00"), currency="EUR", description="", by=oscar
    )
    drafts = statements_compute(
        period=april, disclosure=disclosure, until=APRIL_START + dt.timedelta(hours=2)
    )
    names = {str(pk): name for pk, name in Owner.objects.values_list("pk", "legal_name")}
    parts = {names[owner]: _pool_parts(draft.frozen) for (owner, _), draft in drafts.items()}
    assert parts == {
        "Alice Compute Ltd": [("SN-1", "busy_gpu_hours", "3.85")],
        "Bob Chen": [("SN-2", "busy_gpu_hours", "6.15")],
    }


def test_a_basis_change_reaching_a_computed_period_is_refused(march_closed, oscar):
    cluster = march_closed["fleet"].cluster
    with pytest.raises(ValidationError) as refused:
        cluster_pool_basis_set(
            cluster=cluster,
            basis="busy_gpu_hours",
            effective_from=MARCH[0],
            reason="back-dated",
            by=oscar,
        )
    assert refused.value.message_dict == {
        "effective_from": [
            f"The change of cluster {cluster}'s pool basis reaches into period 2026-03 "
            "(March 2026), which is closed; the statements of a closing or closed period take "
            "no changes. Make it take effect at 2026-04-01T00:00:00Z or later."
        ]
    }
    assert not ClusterBilling.objects.exists()
    assert Period.objects.get(pk=march_closed["march"].pk).status == Period.Status.CLOSED


@pytest.mark.parametrize(
    ("effective_from", "field", "message"),
    [
        (
            dt.datetime(2026, 4, 15, tzinfo=UTC),
            "effective_from",
            "2026-04-15T00:00:00Z is not the start of a month; a pool basis changes only at a "
            "period's start (the first second of a calendar month, e.g. 2026-04-01T00:00:00Z), "
            "so that a period has one basis.",
        ),
        (
            dt.datetime(2026, 5, 1, 0, 0, 0, 500_000, tzinfo=UTC),
            "effective_from",
            "2026-05-01T00:00:00.500000Z has a fraction of a second; changes happen on whole "
            "seconds.",
        ),
    ],
)
def test_a_basis_change_takes_effect_only_at_a_month_start(
    fleet_only, oscar, effective_from, field, message
):
    with pytest.raises(ValidationError) as refused:
        cluster_pool_basis_set(
            cluster=fleet_only.cluster,
            basis="busy_gpu_hours",
            effective_from=effective_from,
            reason="why",
            by=oscar,
        )
    assert refused.value.message_dict == {field: [message]}


@pytest.fixture
def fleet_only(db):
    return s.fleet()


def test_a_change_inside_a_recorded_period_a_blank_reason_and_a_second_change_at_an_instant(
    fleet_only, oscar
):
    cluster = fleet_only.cluster
    Period.objects.create(
        start=dt.datetime(2026, 6, 15, tzinfo=UTC), end=dt.datetime(2026, 7, 15, tzinfo=UTC)
    )
    with pytest.raises(ValidationError, match="is inside period 2026-06-15; a pool basis"):
        cluster_pool_basis_set(
            cluster=cluster,
            basis="busy_gpu_hours",
            effective_from=dt.datetime(2026, 7, 1, tzinfo=UTC),
            reason="why",
            by=oscar,
        )
    with pytest.raises(ValidationError, match=r"Say why the basis changes\."):
        cluster_pool_basis_set(
            cluster=cluster, basis="busy_gpu_hours", effective_from=MARCH[0], reason=" ", by=oscar
        )
    cluster_pool_basis_set(
        cluster=cluster, basis="busy_gpu_hours", effective_from=MARCH[0], reason="one", by=oscar
    )
    with pytest.raises(ValidationError, match="already changes at 2026-03-01T00:00:00Z"):
        cluster_pool_basis_set(
            cluster=cluster, basis="up_seconds", effective_from=MARCH[0], reason="two", by=oscar
        )
    # A later change ends the earlier one's reach: each keeps its own months.
    cluster_pool_basis_set(
        cluster=cluster, basis="up_seconds", effective_from=APRIL_START, reason="two", by=oscar
    )
    assert [
        pool_basis_in_force(cluster_id=cluster.pk, at=at)
        for at in (dt.datetime(2026, 2, 1, tzinfo=UTC), MARCH[0], APRIL_START)
    ] == ["up_seconds", "busy_gpu_hours", "up_seconds"]

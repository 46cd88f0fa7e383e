"""The overview's preliminary earnings compute only what they show
(``billing.selectors.earnings._preliminary_lines``), and what they show is exactly what
``statements_compute`` — the close's own code — gives the same owners up to the same instant:
with and without a pool (split over every GPU of the cluster, another owner's too), a share
change at an odd second, a rental, a rate card changing at a midnight (a cut the lean path
keeps although it drops the statements' other midnights), and a second cluster; and the
same refusal when a rate card leaves time uncovered."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Period, PoolRevenue
from billing.selectors.earnings import _preliminary_lines, owner_earnings
from billing.services.computing import statements_compute
from billing.services.revenue import rental_create
from fleet.models import Cluster, Node
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
CARD_CHANGE = dt.datetime(2026, 3, 2, tzinfo=UTC)  # a midnight
TRANSFER = dt.datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)
NOW = dt.datetime(2026, 3, 3, 14, 37, 25, tzinfo=UTC)
FIELDS = ("gross", "hosting_fee", "power_cost", "management_fee", "net")


@pytest.fixture
def disclosure():
    from accounts import services as accounts

    return accounts.disclosure_standard_ensure()


@pytest.fixture
def site(oscar, disclosure):
    a = s.fleet()
    cluster_b = Cluster.objects.create(site=a.site, code="b", name="B")
    node_b = Node.objects.create(cluster=cluster_b, hostname="fra1-b-n01")
    b = s.Fleet(a.site, cluster_b, node_b, a.model)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    g1 = s.gpu(a, "SN-1", slot=0)
    g2 = s.gpu(a, "SN-2", slot=1)
    g3 = s.gpu(a, "SN-3", slot=2)
    g4 = s.gpu(b, "SN-4", slot=0, node=node_b)
    s.own(g1, alice, 10_000, s.EPOCH)
    s.own(g2, alice, 5_000, s.EPOCH, TRANSFER)
    s.own(g2, bob, 5_000, s.EPOCH, TRANSFER)
    s.own(g2, alice, 10_000, TRANSFER)
    s.own(g3, bob, 10_000, s.EPOCH)  # another owner's GPU in Alice's cluster
    s.own(g4, alice, 10_000, s.EPOCH)
    s.card(a, oscar, effective_to=CARD_CHANGE)
    s.card(a, oscar, effective_from=CARD_CHANGE, hosting_fee_per_gpu_month=Decimal("150.00"))
    s.card(b, oscar, management_fee_pct=Decimal("12.5"))
    start = MARCH[0] - dt.timedelta(minutes=1)
    s.windows(g1, start, NOW, node=a.node, util=61.0)
    s.windows(g2, start, NOW, node=a.node, util=47.5, skip=[(TRANSFER, TRANSFER + s.MINUTE * 90)])
    s.windows(g3, start, NOW, node=a.node, util=90.0, energy_per_minute=48_000_000)
    s.windows(g4, start, NOW, node=b.node, state="up", util=33.3)
    s.rebuild(MARCH[0], NOW)
    rental_create(
        cluster=a.cluster,
        gpus=[g2],
        starts_at=dt.datetime(2026, 3, 1, 6, tzinfo=UTC),
        ends_at=dt.datetime(2026, 3, 8, tzinfo=UTC),
        rate_per_gpu_hour=Decimal("2.35"),
        currency="EUR",
        customer_reference="R-1",
        by=oscar,
    )
    return {"a": a, "b": b, "alice": alice, "bob": bob, "disclosure": disclosure}


def _sums_by_close(period, disclosure, owners, until):
    drafts = statements_compute(period=period, disclosure=disclosure, owner_ids=owners, until=until)
    return {
        key: (len(d.gpu_lines), *(sum(Decimal(line[f]) for line in d.gpu_lines) for f in FIELDS))
        for key, d in drafts.items()
        if d.gpu_lines
    }


def _sums_lean(period, owners, until):
    found = _preliminary_lines(period=period, owner_ids=owners, until=until)
    return {
        key: (len(lines), *(sum(getattr(line, f) for line in lines) for f in FIELDS))
        for key, lines in found.items()
    }


def _period(saved: bool) -> Period:
    if saved:
        return Period.objects.create(start=MARCH[0], end=MARCH[1])
    return Period(start=MARCH[0], end=MARCH[1])


@pytest.mark.parametrize("pool", [None, Decimal("1000.00"), Decimal("0.00")])
@pytest.mark.parametrize("until", [NOW, MARCH[1]])
@pytest.mark.parametrize("who", ["alice", "bob", "both"])
def test_the_lean_lines_sum_to_what_the_close_computes(site, pool, until, who):
    period = _period(saved=pool is not None)
    if pool is not None:
        PoolRevenue.objects.create(
            cluster=site["a"].cluster, period=period, amount=pool, currency="EUR"
        )
    owners = {
        "alice": {str(site["alice"].pk)},
        "bob": {str(site["bob"].pk)},
        "both": {str(site["alice"].pk), str(site["bob"].pk)},
    }[who]
    expected = _sums_by_close(period, site["disclosure"], owners, until)
    assert expected  # the comparison cannot pass on nothing
    assert _sums_lean(period, owners, until) == expected


def test_the_overview_figures_are_the_close_figures(site):
    alice = site["alice"]
    (earned,) = owner_earnings(
        owner_ids=[alice.pk],
        start=MARCH[0],
        end=MARCH[1],
        now=NOW,
        disclosure=site["disclosure"],
    )
    ((lines, *sums),) = _sums_by_close(
        _period(saved=False), site["disclosure"], {str(alice.pk)}, NOW
    ).values()
    assert earned.lines == lines == 4  # SN-1, SN-2 at half then whole, SN-4
    assert [getattr(earned, f) for f in FIELDS] == sums
    assert earned.gross > 0 and earned.hosting_fee > 0


def test_time_no_rate_card_covers_is_refused_as_the_close_refuses_it(site, oscar):
    # Cluster B's card ends before now: SN-4 (Alice's) is in service with no card; SN-3
    # (Bob's, in cluster A) is unaffected, yet the close refuses the whole computation.
    from billing.models import RateCard

    RateCard.objects.filter(cluster=site["b"].cluster).update(
        effective_to=dt.datetime(2026, 3, 2, 8, tzinfo=UTC)
    )
    period = _period(saved=False)
    for owners in ({str(site["alice"].pk)}, {str(site["bob"].pk), str(site["alice"].pk)}):
        with pytest.raises(ValidationError) as by_close:
            statements_compute(
                period=period, disclosure=site["disclosure"], owner_ids=owners, until=NOW
            )
        with pytest.raises(ValidationError) as lean:
            _preliminary_lines(period=period, owner_ids=owners, until=NOW)
        assert lean.value.message_dict == by_close.value.message_dict

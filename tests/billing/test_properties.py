"""Properties: a statement's totals are the sums of its lines; however operators click,
a statement is published at most once, and never by its requester."""

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts import services as accounts
from accounts.models import Owner
from billing.engine.cells import Cell, CellUsage
from billing.engine.document import document, line_document
from billing.engine.intervals import Interval
from billing.engine.statement import GpuInputs, OwnershipSlice, PoolBasis, RateTerms, cluster_lines
from billing.models import Period, Statement
from billing.services.publishing import statement_publish_approve, statement_publish_request
from tests.conftest import PASSWORD

UTC = dt.UTC
MARCH = Interval(dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
SPAN = int((MARCH.end - MARCH.start).total_seconds())
TERMS = RateTerms(
    interval=Interval(dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2100, 1, 1, tzinfo=UTC)),
    hosting_fee_per_gpu_month=Decimal("97.13"),
    price_per_kwh=Decimal("0.2317"),
    pue=Decimal("1.37"),
    management_fee_pct=Decimal("12.5"),
)


def _gpu(key, cut, shares_before, shares_after, up_fraction):
    at = MARCH.start + dt.timedelta(seconds=cut)
    cells = [
        Cell(
            interval=Interval(a, b),
            in_service=True,
            maintenance=False,
            incident=False,
            operator_incident=False,
            telemetry_up_s=int((b - a).total_seconds() * up_fraction),
            whole_busy_pct_s=Decimal(int((b - a).total_seconds() * up_fraction)) * 37,
            whole_energy_kwh=Decimal("0.01") * int((b - a).total_seconds() // 60),
        )
        for a, b in ((MARCH.start, at), (at, MARCH.end))
    ]
    return GpuInputs(
        key=key,
        timeline=CellUsage(cells),
        ownership=[
            OwnershipSlice(Interval(TERMS.interval.start, at), shares_before),
            OwnershipSlice(Interval(at, TERMS.interval.end), shares_after),
        ],
    )


shares = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 3333), min_size=1)


@given(
    gpus=st.lists(
        st.tuples(st.integers(1, SPAN - 1), shares, shares, st.floats(0.1, 1.0)),
        min_size=1,
        max_size=4,
    ),
    pool=st.integers(0, 10**7),
    adjustments=st.lists(st.integers(-(10**5), 10**5).filter(bool), max_size=3),
    payouts=st.lists(st.integers(1, 10**5), max_size=2),
    opening=st.integers(-(10**6), 10**6),
)
@settings(max_examples=60, deadline=None)
def test_statement_totals_are_the_sums_of_their_lines(gpus, pool, adjustments, payouts, opening):
    inputs = [_gpu(f"SN-{i}", *g) for i, g in enumerate(gpus)]
    result = cluster_lines(
        period=MARCH,
        gpus=inputs,
        pool_amount=Decimal(pool) / 100,
        pool_basis=PoolBasis.BUSY_GPU_HOURS,
        rates=[TERMS],
    )
    # The pool is handed out to the cent over owners and the operator.
    assert (
        sum((line.gross for line in result.lines), Decimal(0))
        + sum((r.operator_part for r in result.revenue), Decimal(0))
        == Decimal(pool) / 100
    )
    for owner in ("a", "b", "c"):
        lines = [line_document(line, "g") for line in result.lines if line.owner == owner]
        frozen: dict[str, Any] = {
            "owner_id": owner,
            "currency": "EUR",
            "period": ["x", "y"],
            "disclosure": {},
            "opening_balance": str(Decimal(opening) / 100),
            "adjustments": [{"amount": str(Decimal(a) / 100)} for a in adjustments],
            "payouts": [{"amount": str(Decimal(p) / 100)} for p in payouts],
        }
        doc = document(frozen=frozen, lines=lines)
        nets = [Decimal(d["net"]) for d in lines]
        assert Decimal(doc["lines_total"]) == sum(nets, Decimal(0))
        for d in lines:
            assert Decimal(d["net"]) == Decimal(d["gross"]) - Decimal(d["hosting_fee"]) - Decimal(
                d["power_cost"]
            ) - Decimal(d["management_fee"])
        assert Decimal(doc["closing_balance"]) == (
            Decimal(doc["opening_balance"])
            + Decimal(doc["lines_total"])
            + sum((Decimal(a) / 100 for a in adjustments), Decimal(0))
            - sum((Decimal(p) / 100 for p in payouts), Decimal(0))
        )


@pytest.fixture
def operators(db):
    return [
        accounts.user_create(email=f"op{i}@steward.example", password=PASSWORD, is_staff=True)
        for i in range(3)
    ]


@pytest.fixture
def closing_period(db):
    return Period.objects.create(start=MARCH.start, end=MARCH.end, status=Period.Status.CLOSING)


def _draft(period):
    owner = Owner.objects.create(
        kind=Owner.Kind.PERSON, legal_name=f"O {uuid.uuid4().hex[:6]}", contact_email="o@x.example"
    )
    frozen = {
        "owner_id": str(owner.pk),
        "currency": "EUR",
        "period": ["2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"],
        "disclosure": {"version": "v", "sha256": "0" * 64},
        "opening_balance": "0.00",
        "opening_from_statement": None,
        "adjustments": [],
        "payouts": [],
        "gpus": [],
    }
    from billing.engine.document import document_from_frozen, sha256_hex

    return Statement.objects.create(
        owner=owner,
        period=period,
        currency="EUR",
        opening_balance=Decimal(0),
        lines_total=Decimal(0),
        adjustments_total=Decimal(0),
        payouts_total=Decimal(0),
        closing_balance=Decimal(0),
        frozen_inputs=frozen,
        content_sha256=sha256_hex(document_from_frozen(frozen)),
        disclosure_version="v",
        disclosure_sha256="0" * 64,
        computed_at=MARCH.end,
    )


@pytest.mark.django_db
@given(
    clicks=st.lists(
        st.tuples(st.sampled_from(["request", "approve"]), st.integers(0, 2)), max_size=8
    )
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_publishing_however_operators_click_publishes_at_most_once(
    clicks, operators, closing_period
):
    statement = _draft(closing_period)
    published = 0
    for action, who in clicks:
        service = statement_publish_request if action == "request" else statement_publish_approve
        try:
            service(statement=statement, by=operators[who])
        except ValidationError:
            continue
        published += action == "approve"
    final = Statement.objects.get(pk=statement.pk)
    assert published <= 1
    assert (final.status == Statement.Status.PUBLISHED) == (published == 1)
    if published:
        assert final.approved_by_id != final.requested_by_id

"""The database itself keeps published statements immutable and ledgers append-only."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from billing.models import Adjustment, Payout, Period, RateCard, Statement, StatementLine
from fleet.models import Cluster, Gpu, GpuModel, Site

pytestmark = pytest.mark.django_db

MARCH = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))


@pytest.fixture
def period():
    return Period.objects.create(start=MARCH[0], end=MARCH[1])


@pytest.fixture
def gpu():
    model = GpuModel.objects.create(name="NVIDIA H100 80GB HBM3", memory_mib=81559, tdp_w=700)
    return Gpu.objects.create(nvml_uuid="GPU-1", serial="SN-1", model=model)


@pytest.fixture
def cluster():
    site = Site.objects.create(code="fra1", name="Frankfurt 1", country="DE")
    return Cluster.objects.create(site=site, code="a", name="A")


def _statement(owner, period):
    return Statement.objects.create(
        owner=owner,
        period=period,
        currency="EUR",
        opening_balance=Decimal("0.00"),
        lines_total=Decimal("12.00"),
        adjustments_total=Decimal("0.00"),
        payouts_total=Decimal("0.00"),
        closing_balance=Decimal("12.00"),
        frozen_inputs={},
        content_sha256="0" * 64,
        disclosure_version="2026-01",
        disclosure_sha256="1" * 64,
        computed_at=MARCH[1],
    )


def _line(statement, gpu, position=1):
    return StatementLine.objects.create(
        statement=statement,
        position=position,
        kind="gpu",
        gpu=gpu,
        gross=Decimal("20.00"),
        hosting_fee=Decimal("5.00"),
        power_cost=Decimal("2.00"),
        management_fee=Decimal("1.00"),
        net=Decimal("12.00"),
    )


def _publish(statement, requester, approver):
    Statement.objects.filter(pk=statement.pk).update(
        status="published",
        requested_by=requester,
        approved_by=approver,
        requested_at=MARCH[1],
        published_at=MARCH[1],
    )


def _raw(sql, *params):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_published_statement_and_its_lines_reject_every_change(
    alice_owner, period, gpu, oscar, alice
):
    statement = _statement(alice_owner, period)
    line = _line(statement, gpu)
    _publish(statement, oscar, alice)
    with pytest.raises(IntegrityError, match="is published and cannot be changed or deleted"):
        _raw("UPDATE billing_statement SET closing_balance = 0 WHERE id = %s", statement.pk)
    with pytest.raises(IntegrityError, match="is published and cannot be changed or deleted"):
        _raw("DELETE FROM billing_statement WHERE id = %s", statement.pk)
    with pytest.raises(IntegrityError, match="its lines cannot be added, changed or deleted"):
        # A change that would otherwise be valid (net = gross - fees): only the guard refuses it.
        _raw("UPDATE billing_statementline SET net = 1, gross = 9 WHERE id = %s", line.pk)
    with (
        pytest.raises(IntegrityError, match="its lines cannot be added, changed or deleted"),
        transaction.atomic(),
    ):
        StatementLine.objects.filter(pk=line.pk).delete()
    with (
        pytest.raises(IntegrityError, match="its lines cannot be added, changed or deleted"),
        transaction.atomic(),
    ):
        _line(statement, gpu, position=2)
    statement.refresh_from_db()
    assert statement.closing_balance == Decimal("12.00")


def test_lines_are_guarded_per_statement_whatever_rows_it_touches(
    alice_owner, bob_owner, period, gpu, oscar, alice
):
    """The guard runs once per SQL statement over all the rows it touched (migration
    0012): one that touches a draft's lines and a published statement's together is
    refused whole, a line moved into or out of a published statement is refused, and the
    same statements on drafts alone pass."""
    draft = _statement(bob_owner, period)
    published = _statement(alice_owner, period)
    draft_line = _line(draft, gpu)
    published_line = _line(published, gpu)
    _publish(published, oscar, alice)
    columns = ", ".join(
        str(f.column)
        for f in StatementLine._meta.concrete_fields
        if f.column not in ("id", "position")
    )
    copy_both = (
        f"INSERT INTO billing_statementline (position, {columns}) SELECT position + 10, "  # noqa: S608
        f"{columns} FROM billing_statementline WHERE id = ANY(%s)"
    )
    with pytest.raises(IntegrityError, match=f"Statement {published.pk} is published"):
        _raw(copy_both, [draft_line.pk, published_line.pk])
    with pytest.raises(IntegrityError, match=f"Statement {published.pk} is published"):
        _raw("DELETE FROM billing_statementline WHERE id = ANY(%s)",
             [draft_line.pk, published_line.pk])  # fmt: skip
    for moved, to in ((draft_line, published), (published_line, draft)):
        with pytest.raises(IntegrityError, match=f"Statement {published.pk} is published"):
            _raw("UPDATE billing_statementline SET statement_id = %s, position = 99 "
                 "WHERE id = %s", to.pk, moved.pk)  # fmt: skip
    assert sorted(StatementLine.objects.values_list("statement_id", "position")) == sorted(
        [(draft.pk, 1), (published.pk, 1)]
    )
    _raw(copy_both, [draft_line.pk])  # a draft's lines alone: allowed
    _raw("UPDATE billing_statementline SET net = 1, gross = 9 WHERE statement_id = %s", draft.pk)
    _raw("DELETE FROM billing_statementline WHERE statement_id = %s", draft.pk)
    assert list(StatementLine.objects.values_list("statement_id", flat=True)) == [published.pk]


def _truncate(tables):
    """TRUNCATE as a session of the application would (the suite's own sessions may)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL steward.allow_truncate = off")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's rows' deferred checks
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def test_truncate_is_refused_while_published_statements_or_ledger_rows_exist(
    alice_owner, period, gpu, oscar, alice
):
    statement = _statement(alice_owner, period)
    _line(statement, gpu)
    _truncate("billing_statementline, billing_statement")  # drafts only: allowed
    statement = _statement(alice_owner, period)
    _line(statement, gpu)
    _publish(statement, oscar, alice)
    for tables in ("billing_statement", "billing_statementline"):
        with pytest.raises(IntegrityError, match=f"{tables} cannot be truncated"):
            _truncate(tables)
    assert Statement.objects.get(pk=statement.pk).status == "published"
    assert StatementLine.objects.filter(statement=statement).count() == 1
    Payout.objects.create(
        owner=alice_owner, currency="EUR", amount=Decimal("1.00"), paid_on=MARCH[1].date(),
        reference="P-1", created_by=oscar,
    )  # fmt: skip
    with pytest.raises(IntegrityError, match="billing_payout cannot be truncated"):
        _truncate("billing_payout")
    assert Payout.objects.count() == 1


def test_a_draft_can_be_recomputed(alice_owner, period, gpu, oscar, alice):
    statement = _statement(alice_owner, period)
    _line(statement, gpu)
    StatementLine.objects.filter(statement=statement).delete()
    Statement.objects.filter(pk=statement.pk).update(
        lines_total=Decimal("0.00"), closing_balance=Decimal("0.00")
    )
    assert StatementLine.objects.count() == 0


@pytest.mark.parametrize("requester", ["oscar", None])
def test_publishing_needs_a_second_operator(alice_owner, period, oscar, requester):
    """Self-approval, and an approval with no request recorded (a NULL requester compared
    with the approver is never "different"), are both refused whatever the path."""
    statement = _statement(alice_owner, period)
    with (
        pytest.raises(IntegrityError, match="billing_statement_published_by_a_second_operator"),
        transaction.atomic(),
    ):
        _publish(statement, oscar if requester else None, oscar)
    with pytest.raises(IntegrityError, match="billing_statement_published_by_a_second_operator"):
        _raw(
            "UPDATE billing_statement SET status = 'published', approved_by_id = %s, "
            "published_at = now() WHERE id = %s",
            oscar.pk,
            statement.pk,
        )


def test_balance_must_add_up(alice_owner, period):
    with pytest.raises(IntegrityError, match="billing_statement_balance_adds_up"):
        Statement.objects.create(
            owner=alice_owner,
            period=period,
            currency="EUR",
            opening_balance=Decimal("1.00"),
            lines_total=Decimal("1.00"),
            adjustments_total=Decimal("0.00"),
            payouts_total=Decimal("0.00"),
            closing_balance=Decimal("3.00"),
            frozen_inputs={},
            content_sha256="",
            disclosure_version="",
            disclosure_sha256="",
            computed_at=MARCH[1],
        )


def test_adjustments_and_payouts_are_append_only(alice_owner, period):
    adjustment = Adjustment.objects.create(
        owner=alice_owner,
        period=period,
        currency="EUR",
        amount=Decimal("-3.10"),
        reason="late telemetry",
    )
    payout = Payout.objects.create(
        owner=alice_owner,
        currency="EUR",
        amount=Decimal("50.00"),
        paid_on=date(2026, 4, 5),
        reference="SEPA-1",
    )
    with pytest.raises(IntegrityError, match="billing_adjustment rows are append-only"):
        _raw("UPDATE billing_adjustment SET amount = 1 WHERE id = %s", adjustment.pk)
    with pytest.raises(IntegrityError, match="billing_payout rows are append-only"):
        _raw("DELETE FROM billing_payout WHERE id = %s", payout.pk)


def test_rate_cards_of_a_cluster_and_currency_cannot_overlap(cluster):
    common = {
        "cluster": cluster,
        "hosting_fee_per_gpu_month": Decimal("100"),
        "price_per_kwh": Decimal("0.2"),
        "pue": Decimal("1.3"),
        "management_fee_pct": Decimal("10"),
    }
    RateCard.objects.create(
        currency="EUR", effective_from=MARCH[0], effective_to=MARCH[1], **common
    )
    RateCard.objects.create(currency="USD", effective_from=MARCH[0], **common)  # other currency
    RateCard.objects.create(currency="EUR", effective_from=MARCH[1], **common)  # touching
    with pytest.raises(IntegrityError, match="overlaps rate card"), transaction.atomic():
        RateCard.objects.create(
            currency="EUR",
            effective_from=datetime(2026, 3, 15, tzinfo=UTC),
            effective_to=datetime(2026, 3, 20, tzinfo=UTC),
            **common,
        )
    with pytest.raises(IntegrityError, match="billing_ratecard_sane_prices"), transaction.atomic():
        RateCard.objects.create(
            currency="GBP", effective_from=MARCH[0], **{**common, "price_per_kwh": Decimal("-0.1")}
        )

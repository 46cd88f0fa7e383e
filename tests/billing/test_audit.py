"""Every billing action leaves one audit entry, written in the transaction of its change:
who did it, what, to which object, why, and before/after where it means something."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import models, transaction

from accounts.models import AuditEntry, User
from billing.models import (
    Adjustment,
    ClusterBilling,
    Period,
    PoolRevenue,
    RateCard,
    Rental,
    Statement,
)
from billing.services import closing, ledger, publishing, reconciliation, revenue
from billing.services.audit import BILLING_ACTIONS, billing_audit
from billing.services.periods import period_for_month
from tests.billing import scenario as s
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
APRIL = dt.datetime(2026, 4, 1, tzinfo=UTC)


@pytest.fixture
def world(oscar, disclosure) -> dict[str, Any]:
    """March: SN-1, wholly Alice's, up for two hours; one EUR rate card (100.00 a month)."""
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar)
    s.windows(gpu, MARCH[0], MARCH[0] + dt.timedelta(hours=2), node=f.node)
    s.rebuild(*MARCH)
    return {"fleet": f, "gpu": gpu, "alice": alice, "march": period_for_month(year=2026, month=3)}


def _only(action: str, obj: models.Model) -> AuditEntry:
    entries = list(
        AuditEntry.objects.filter(
            action=action, object_type=obj._meta.label_lower, object_id=str(obj.pk)
        )
    )
    assert len(entries) == 1, entries
    return entries[0]


def _after(entry: AuditEntry) -> dict[str, Any]:
    after = entry.after
    assert isinstance(after, dict), after
    return after


def _assert_entry(entry: AuditEntry, *, actor: User | None, reason: str) -> None:
    assert (entry.actor, entry.reason) == (actor, reason)


def _rent(world: dict[str, Any], by: User, **extra: Any) -> Rental:
    return revenue.rental_create(
        cluster=world["fleet"].cluster,
        gpus=[world["gpu"]],
        starts_at=MARCH[0],
        ends_at=MARCH[0] + dt.timedelta(hours=2),
        rate_per_gpu_hour=D("100.00"),
        currency="EUR",
        customer_reference="ACME-7",
        by=by,
        **extra,
    )


def _close(world: dict[str, Any], by: User) -> Statement:
    closing.period_close(period=world["march"], by=by)
    return Statement.objects.get(period=world["march"])


def _publish(world: dict[str, Any], requester: User, approver: User) -> Statement:
    statement = _close(world, requester)
    publishing.statement_publish_request(statement=statement, by=requester)
    return publishing.statement_publish_approve(statement=statement, by=approver)


# ---- money inputs ----------------------------------------------------------------------------


def test_a_rate_card_created_is_audited_with_its_terms(world, oscar):
    card = revenue.rate_card_create(
        cluster=world["fleet"].cluster,
        currency="USD",
        effective_from=APRIL,
        effective_to=None,
        hosting_fee_per_gpu_month=D("90.00"),
        price_per_kwh=D("0.25"),
        pue=D("1.3"),
        management_fee_pct=D("8"),
        waive_hosting_in_operator_incidents=True,
        by=oscar,
        reason="USD owners from April",
    )
    entry = _only("billing.rate_card.create", card)
    _assert_entry(entry, actor=oscar, reason="USD owners from April")
    assert entry.before is None
    assert entry.after == {
        "cluster_id": str(world["fleet"].cluster.pk),
        "currency": "USD",
        "effective_from": "2026-04-01T00:00:00Z",
        "effective_to": None,
        "hosting_fee_per_gpu_month": "90.00",
        "price_per_kwh": "0.25",
        "pue": "1.3",
        "management_fee_pct": "8",
        "waive_hosting_in_operator_incidents": True,
        "waive_hosting_when_down": False,
    }


def test_a_rate_card_ended_is_audited_with_its_old_and_new_end(world, olga):
    card = RateCard.objects.get()
    revenue.rate_card_end(card=card, at=APRIL, by=olga, reason="New terms from April")
    entry = _only("billing.rate_card.end", card)
    _assert_entry(entry, actor=olga, reason="New terms from April")
    assert (entry.before, entry.after) == (
        {"effective_to": None},
        {"effective_to": "2026-04-01T00:00:00Z"},
    )


def test_a_pool_basis_change_is_audited_with_the_basis_it_replaces(world, oscar):
    row = revenue.cluster_pool_basis_set(
        cluster=world["fleet"].cluster,
        basis=ClusterBilling.PoolBasis.BUSY_GPU_HOURS,
        effective_from=APRIL,
        reason="Marketplace pays by work done",
        by=oscar,
    )
    entry = _only("billing.pool_basis.set", row)
    _assert_entry(entry, actor=oscar, reason="Marketplace pays by work done")
    assert entry.before == {"pool_split_basis": "up_seconds"}
    assert entry.after == {
        "cluster_id": str(world["fleet"].cluster.pk),
        "effective_from": "2026-04-01T00:00:00Z",
        "pool_split_basis": "busy_gpu_hours",
    }


def test_a_rental_is_audited_with_its_gpus(world, oscar):
    rental = _rent(world, oscar, reason="Signed order 7")
    entry = _only("billing.rental.create", rental)
    _assert_entry(entry, actor=oscar, reason="Signed order 7")
    assert _after(entry)["gpus"] == ["SN-1"]
    assert (_after(entry)["rate_per_gpu_hour"], _after(entry)["customer_reference"]) == (
        "100.00",
        "ACME-7",
    )


def test_a_pool_amount_is_audited(world, oscar):
    pool = revenue.pool_add(
        cluster=world["fleet"].cluster,
        period=world["march"],
        amount=D("250.00"),
        currency="EUR",
        description="Marketplace, March",
        by=oscar,
        reason="Statement from the marketplace",
    )
    entry = _only("billing.pool.add", pool)
    _assert_entry(entry, actor=oscar, reason="Statement from the marketplace")
    assert (_after(entry)["amount"], _after(entry)["period_id"]) == ("250.00", world["march"].pk)


def test_an_adjustment_is_audited_with_its_reason(world, oscar):
    adjustment = ledger.adjustment_add(
        owner=world["alice"],
        period=world["march"],
        currency="EUR",
        amount=D("-5.00"),
        reason="  Goodwill for the outage on the 3rd  ",
        by=oscar,
    )
    entry = _only("billing.adjustment.add", adjustment)
    _assert_entry(entry, actor=oscar, reason="Goodwill for the outage on the 3rd")
    assert (_after(entry)["amount"], _after(entry)["source"]) == ("-5.00", "manual")


def test_a_payout_is_audited_with_the_balance_it_was_checked_against(world, oscar, olga):
    _rent(world, oscar)  # 2 h × 100.00: a positive balance to pay out from
    statement = _publish(world, oscar, olga)
    payout = ledger.payout_record(
        owner=world["alice"],
        currency="EUR",
        amount=D("10.00"),
        paid_on=dt.date(2026, 4, 3),
        reference="SEPA-0001",
        by=olga,
        reason="Monthly payout",
    )
    entry = _only("billing.payout.record", payout)
    _assert_entry(entry, actor=olga, reason="Monthly payout")
    assert entry.after == {
        "owner_id": str(world["alice"].pk),
        "currency": "EUR",
        "amount": "10.00",
        "paid_on": "2026-04-03",
        "reference": "SEPA-0001",
        "available_before": str(statement.closing_balance),
    }


# ---- the close and publishing ------------------------------------------------------------


def test_starting_a_close_is_audited_with_its_operator(world, oscar):
    period = closing.period_close_start(period=world["march"], by=oscar, reason="Month end")
    entry = _only("billing.period.close_start", period)
    _assert_entry(entry, actor=oscar, reason="Month end")
    assert entry.before == {"status": "open"}
    assert _after(entry)["status"] == "closing"


def test_computing_the_drafts_is_audited_with_its_counts(world, oscar, olga):
    period = closing.period_close_start(period=world["march"], by=oscar)
    closing.period_close_run(period=period, by=olga, reason="After the late batch")
    entry = _only("billing.period.compute", period)
    _assert_entry(entry, actor=olga, reason="After the late batch")
    assert entry.after == {"written": 1, "unchanged": 0, "removed": 0, "skipped_published": 0}


def test_a_close_that_cannot_compute_reopens_the_period_and_says_why(world, oscar):
    # Revenue in USD for a cluster whose only owner is billed in EUR: the drafts are refused.
    revenue.pool_add(
        cluster=world["fleet"].cluster,
        period=world["march"],
        amount=D("10.00"),
        currency="USD",
        description="",
        by=oscar,
    )
    with pytest.raises(ValidationError, match="Steward converts no currencies"):
        closing.period_close(period=world["march"], by=oscar, reason="Month end")
    march = Period.objects.get(pk=world["march"].pk)
    assert march.status == Period.Status.OPEN
    assert [e.action for e in AuditEntry.objects.filter(object_type="billing.period")] == [
        "billing.period.reopen",  # newest first
        "billing.period.close_start",
    ]
    entry = _only("billing.period.reopen", march)
    assert entry.actor == oscar
    assert entry.reason.startswith("The drafts could not be computed: GPU SN-1 in cluster")
    assert (entry.before, entry.after) == ({"status": "closing"}, {"status": "open"})


def test_a_publish_request_is_audited(world, oscar):
    statement = _close(world, oscar)
    publishing.statement_publish_request(statement=statement, by=oscar, reason="Checked")
    entry = _only("billing.statement.publish_request", statement)
    _assert_entry(entry, actor=oscar, reason="Checked")
    assert (entry.before, entry.after) == (
        {"status": "draft"},
        {"status": "publish_requested", "content_sha256": statement.content_sha256},
    )


def test_a_publish_approval_is_audited_with_its_requester(world, oscar, olga):
    statement = _close(world, oscar)
    publishing.statement_publish_request(statement=statement, by=oscar)
    publishing.statement_publish_approve(statement=statement, by=olga, reason="Four eyes")
    entry = _only("billing.statement.publish_approve", statement)
    _assert_entry(entry, actor=olga, reason="Four eyes")
    assert entry.before == {"status": "publish_requested", "requested_by_id": oscar.pk}
    assert _after(entry)["status"] == "published"


def test_finishing_a_close_is_audited(world, oscar, olga):
    _publish(world, oscar, olga)
    period = closing.period_close_finish(period=world["march"], by=olga, reason="All published")
    entry = _only("billing.period.close_finish", period)
    _assert_entry(entry, actor=olga, reason="All published")
    assert entry.before == {"status": "closing"}
    assert (_after(entry)["status"], _after(entry)["statements"]) == ("closed", 1)


def test_a_reconciliation_that_adjusts_is_audited_once_and_a_rerun_adds_nothing(world, oscar, olga):
    _publish(world, oscar, olga)
    closing.period_close_finish(period=world["march"], by=olga)
    # Late telemetry: two more hours up on the 2nd.
    late = dt.datetime(2026, 3, 2, tzinfo=UTC)
    s.windows(world["gpu"], late, late + dt.timedelta(hours=2), node=world["fleet"].node)
    s.rebuild(*MARCH)
    done = reconciliation.period_reconcile(period=world["march"], by=oscar, reason="Late batch")
    assert done.added
    entry = _only("billing.period.reconcile", world["march"])
    _assert_entry(entry, actor=oscar, reason="Late batch")
    assert entry.after == {
        "into_period_id": done.into.pk,
        "adjustments": [a.pk for a in done.added],
        "total": str(sum(a.amount for a in done.added)),
    }
    assert reconciliation.period_reconcile(period=world["march"], by=oscar).added == []
    assert AuditEntry.objects.filter(action="billing.period.reconcile").count() == 1


# ---- no change, no entry -----------------------------------------------------------------


def test_a_refused_change_leaves_no_entry(world, oscar):
    before = AuditEntry.objects.count()
    with pytest.raises(ValidationError, match="close it first"):
        s.card(world["fleet"], oscar, effective_from=APRIL)  # overlaps the open-ended card
    statement = _close(world, oscar)
    publishing.statement_publish_request(statement=statement, by=oscar)
    during = AuditEntry.objects.count()
    with pytest.raises(ValidationError, match="another operator must approve it"):
        publishing.statement_publish_approve(statement=statement, by=oscar)
    assert AuditEntry.objects.count() == during
    assert before + 3 == during  # close start, compute, request: nothing for the refusals
    assert RateCard.objects.count() == 1


def test_a_change_rolled_back_with_its_transaction_leaves_no_entry(world, oscar):
    class Abandoned(Exception):
        pass

    before = AuditEntry.objects.count()
    with pytest.raises(Abandoned), transaction.atomic():
        revenue.pool_add(
            cluster=world["fleet"].cluster,
            period=world["march"],
            amount=D("1.00"),
            currency="EUR",
            description="",
            by=oscar,
        )
        ledger.adjustment_add(
            owner=world["alice"],
            period=world["march"],
            currency="EUR",
            amount=D("1.00"),
            reason="x",
            by=oscar,
        )
        assert AuditEntry.objects.count() == before + 2
        raise Abandoned
    assert AuditEntry.objects.count() == before
    assert not PoolRevenue.objects.exists() and not Adjustment.objects.exists()


def test_an_action_not_listed_is_refused(world):
    with pytest.raises(ValueError, match="not one of billing's audited actions"):
        billing_audit(world["march"], action="billing.period.delete", by=None)


def test_the_docs_list_exactly_the_audited_actions():
    text = (ROOT / "docs" / "accounting.md").read_text()
    section = text.split("### Audit trail", 1)[1].split("\n## ", 1)[0]
    assert sorted(set(re.findall(r"`(billing\.[a-z_]+\.[a-z_]+)`", section))) == sorted(
        BILLING_ACTIONS
    )

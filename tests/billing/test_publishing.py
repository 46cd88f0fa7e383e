"""Publishing takes two operators, reproduces its hash, and happens exactly once; balances
carry forward; reconciliation turns late telemetry into adjustments, once."""

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, close_old_connections, connection, transaction

from billing.engine.document import document_from_frozen, sha256_hex
from billing.models import Adjustment, Period, Statement
from billing.services.closing import period_close, period_close_finish, period_close_run
from billing.services.ledger import payout_record
from billing.services.periods import period_for_month
from billing.services.publishing import (
    statement_publish_approve,
    statement_publish_request,
    statement_reproduces,
)
from billing.services.reconciliation import period_reconcile
from billing.services.revenue import pool_add
from fleet.models import Cluster, Node, Placement
from tests.billing import scenario as s

D = Decimal
UTC = dt.UTC
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
SILENT = (dt.datetime(2026, 2, 20, 3, tzinfo=UTC), dt.datetime(2026, 2, 20, 9, tzinfo=UTC))
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def world(oscar, disclosure):
    """February (28 days): SN-1 wholly Alice's, SN-2 shared 3 ways (Alice, Bob, Carla 1/3
    each, 3,333 bps); a pool of 900.00 EUR split by up seconds; SN-1's agent is silent for
    6 hours on the 20th."""
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    alice, bob, carla = s.owner("Alice Compute Ltd"), s.owner("Bob Chen"), s.owner("Carla Sun")
    s.own(sn1, alice, 10_000, s.EPOCH)
    for o in (alice, bob, carla):
        s.own(sn2, o, 3_333, s.EPOCH)
    s.card(f, oscar)
    start = FEB[0] - dt.timedelta(minutes=1)
    s.windows(sn1, start, FEB[1], node=f.node, skip=[SILENT])
    s.windows(sn2, start, FEB[1], node=f.node)
    s.rebuild(*FEB)
    period = period_for_month(year=2026, month=2)
    pool_add(
        cluster=f.cluster,
        period=period,
        amount=D("900.00"),
        currency="EUR",
        description="",
        by=oscar,
    )
    return {
        "fleet": f,
        "sn1": sn1,
        "sn2": sn2,
        "alice": alice,
        "bob": bob,
        "carla": carla,
        "period": period,
    }


@pytest.mark.django_db
def test_three_way_co_ownership_and_an_agent_silent_for_six_hours(world, oscar):
    period_close(period=world["period"], by=oscar)
    alice = Statement.objects.get(owner=world["alice"])
    sn1 = alice.lines.get(gpu=world["sn1"])
    # 28 days = 2,419,200 s; 6 h silent = 21,600 s of no_data, never down.
    assert (sn1.up_s, sn1.no_data_s, sn1.down_s) == (2_397_600, 21_600, 0)
    assert sn1.availability == D("0.991071")  # 2,397,600 / 2,419,200 = 0.99107142…
    # Pool 900.00 by up seconds 2,397,600 : 2,419,200 → 447.9820… and 452.0179…:
    # floors 447.98 + 452.01 leave a cent for the larger remainder (SN-2's .79 > SN-1's .20).
    # SN-1 is Alice's alone → gross 447.98.
    assert sn1.gross == D("447.98")
    # SN-2's 452.02 over 3 × 3,333 bps + the operator's 1 bps: exact 150.6582… each and
    # 0.0452 for the operator; floors 3 × 150.65 + 0.04 = 451.99 leave 3 cents: the largest
    # remainders are the owners' .82 (ties → larger weight, then order), so 150.66 each.
    grosses = sorted(
        Statement.objects.get(owner=world[name]).lines.get(gpu=world["sn2"]).gross
        for name in ("alice", "bob", "carla")
    )
    assert grosses == [D("150.66")] * 3
    # Hosting for the whole 28-day month × 3,333 bps: 100 × 0.3333 = 33.33.
    bob_line = Statement.objects.get(owner=world["bob"]).lines.get()
    assert bob_line.hosting_fee == D("33.33")
    # Power: 40,320 min × 0.01 kWh = 403.2 kWh × 1.5 × 0.20 = 120.96 × 0.3333 = 40.3159…
    assert bob_line.power_cost == D("40.32")
    # Management 10 % of 150.66 = 15.066 → 15.07. Net 150.66 − 33.33 − 40.32 − 15.07.
    assert (bob_line.management_fee, bob_line.net) == (D("15.07"), D("61.94"))
    # Alice's total is the sum of her two lines.
    assert alice.lines_total == sum(line.net for line in alice.lines.all())


@pytest.mark.django_db
def test_publishing_takes_two_operators_and_reproduces_its_hash(world, oscar, olga):
    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["bob"])
    with pytest.raises(ValidationError, match="Publishing this statement was not requested"):
        statement_publish_approve(statement=statement, by=olga)
    statement_publish_request(statement=statement, by=oscar)
    with pytest.raises(ValidationError, match="another operator must approve it"):
        statement_publish_approve(statement=statement, by=oscar)
    assert Statement.objects.get(pk=statement.pk).status == Statement.Status.PUBLISH_REQUESTED
    published = statement_publish_approve(statement=statement, by=olga)
    assert (published.status, published.approved_by, published.requested_by) == (
        Statement.Status.PUBLISHED,
        olga,
        oscar,
    )
    # Anyone holding the frozen inputs gets the same content and hash.
    assert sha256_hex(document_from_frozen(published.frozen_inputs)) == published.content_sha256
    assert statement_reproduces(statement=published)
    with pytest.raises(ValidationError, match="already published"):
        statement_publish_approve(statement=statement, by=olga)
    # Recomputing drafts leaves a published statement alone.
    run = period_close_run(period=world["period"])
    assert run.skipped_published == 1


@pytest.mark.django_db
def test_the_database_refuses_self_approval_whatever_the_path(world, oscar):
    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["bob"])
    with (
        pytest.raises(IntegrityError, match="published_by_a_second_operator"),
        transaction.atomic(),
    ):
        Statement.objects.filter(pk=statement.pk).update(
            status="published", requested_by=oscar, approved_by=oscar, published_at=MARCH[0]
        )


@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_publish_exactly_once(world, oscar, olga):
    from accounts import services as accounts
    from tests.conftest import PASSWORD

    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["alice"])
    statement_publish_request(statement=statement, by=oscar)
    others = [olga] + [
        accounts.user_create(email=f"op{i}@steward.example", password=PASSWORD, is_staff=True)
        for i in range(5)
    ]
    barrier = threading.Barrier(len(others))
    outcomes: list[str] = []

    def approve(user):
        try:
            barrier.wait()
            statement_publish_approve(statement=statement, by=user)
            outcomes.append("published")
        except ValidationError:
            outcomes.append("refused")
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=approve, args=(u,)) for u in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["published"] + ["refused"] * (len(others) - 1)
    final = Statement.objects.get(pk=statement.pk)
    assert final.status == Statement.Status.PUBLISHED
    assert Statement.objects.filter(status=Statement.Status.PUBLISHED).count() == 1


@pytest.mark.django_db
def test_negative_net_carries_forward_and_payouts_reduce_the_balance(world, oscar, olga):
    # February closes and publishes; March has no revenue at all, so costs make it negative.
    period_close(period=world["period"], by=oscar)
    s.publish_all(world["period"], oscar, olga)
    period_close_finish(period=world["period"], by=oscar)
    bob_feb = Statement.objects.get(owner=world["bob"], period=world["period"])
    assert bob_feb.closing_balance == D("61.94")

    payout_record(
        owner=world["bob"],
        currency="EUR",
        amount=D("61.94"),
        paid_on=dt.date(2026, 3, 5),
        reference="P-1",
        by=oscar,
    )
    # Backdated before February's end (no period row for January): it would appear on no
    # statement and the balance would not count it, so it could be paid twice.
    with pytest.raises(ValidationError, match=r"before the end of .*date the payout 2026-03-01"):
        payout_record(
            owner=world["bob"],
            currency="EUR",
            amount=D("0.01"),
            paid_on=dt.date(2026, 1, 15),
            reference="P-0",
            by=oscar,
        )
    with pytest.raises(ValidationError, match=r"exceeds the balance available, 0\.00 EUR"):
        payout_record(
            owner=world["bob"],
            currency="EUR",
            amount=D("0.01"),
            paid_on=dt.date(2026, 3, 6),
            reference="P-2",
            by=oscar,
        )
    # March: the driver reloaded at midnight, so SN-2's energy counter restarts from zero:
    # its first March window (36,000,000 mJ) is below February's last (1.45 × 10^12 mJ), a
    # reset, and counts its own value — never a negative delta.
    s.windows(world["sn2"], MARCH[0], MARCH[1], node=world["fleet"].node, energy_start=0)
    s.rebuild(*MARCH)
    march = period_for_month(year=2026, month=3)
    period_close(period=march, by=oscar)
    bob_march = Statement.objects.get(owner=world["bob"], period=march)
    (line,) = bob_march.lines.all()
    # No revenue: gross 0, management fee 0. Hosting 100 × 0.3333 = 33.33. Energy: 44,640
    # minutes × 0.01 kWh = 446.4 kWh (the reset minute included) × 1.5 × 0.20 × 0.3333
    # = 44.6355… → 44.64. Net −77.97.
    assert line.energy_kwh == D("446.400000")
    assert (line.gross, line.hosting_fee, line.power_cost) == (D("0.00"), D("33.33"), D("44.64"))
    assert line.net == D("-77.97")
    # Opening 61.94, payout 61.94, lines −77.97: the balance goes negative and carries on.
    assert (bob_march.opening_balance, bob_march.payouts_total) == (D("61.94"), D("61.94"))
    assert bob_march.closing_balance == D("-77.97")
    s.publish_all(march, oscar, olga)
    period_close_finish(period=march, by=oscar)
    april = period_for_month(year=2026, month=4)
    period_close(period=april, by=oscar)
    bob_april = Statement.objects.get(owner=world["bob"], period=april)
    assert bob_april.opening_balance == bob_march.closing_balance  # carried forward


@pytest.mark.django_db
def test_late_telemetry_becomes_adjustments_in_the_next_open_period_once(world, oscar, olga):
    period_close(period=world["period"], by=oscar)
    s.publish_all(world["period"], oscar, olga)
    period_close_finish(period=world["period"], by=oscar)
    march = period_for_month(year=2026, month=3)
    alice_feb = Statement.objects.get(owner=world["alice"], period=world["period"])
    sn1_line = alice_feb.lines.get(gpu=world["sn1"])

    # The silent agent's 6 hours arrive late (its spool flushed): 360 more up minutes, the
    # counter where it would have been.
    before = (SILENT[0] - (FEB[0] - dt.timedelta(minutes=1))) // dt.timedelta(minutes=1)
    s.windows(world["sn1"], *SILENT, node=world["fleet"].node, energy_start=before * 36_000_000)
    s.rebuild(*FEB)
    result = period_reconcile(period=world["period"], by=oscar)
    assert result.into == march
    by_line = {(str(a.owner_id), a.corrects_line_id): a for a in result.added}
    correction = by_line[str(world["alice"].pk), sn1_line.pk]
    # Up seconds now equal: the pool splits 450.00 / 450.00. SN-1's gross 447.98 → 450.00
    # (+2.02), its management fee 44.80 → 45.00 (+0.20): net +1.82.
    assert correction.amount == D("1.82")
    # SN-2's 450.00 over three 3,333 bps owners and the operator's 1 bps: exact 149.985 each
    # and 0.045; floors leave 2 cents, all remainders tie at .5 → larger weight, then order:
    # 149.99, 149.99, 149.98 (from 150.66), fees 15.07 → 15.00: −0.60, −0.60, −0.61.
    sn2 = sorted(a.amount for a in result.added if a.corrects_line_id != sn1_line.pk)
    assert sn2 == [D("-0.61"), D("-0.60"), D("-0.60")]
    assert correction.source == Adjustment.Source.RECONCILIATION
    assert correction.corrects_statement == alice_feb
    assert correction.period == march
    # Nothing new: running again adds nothing.
    assert period_reconcile(period=world["period"], by=oscar).added == []
    # The published statement is untouched, and the adjustments reach March's statements.
    assert Statement.objects.get(pk=alice_feb.pk).content_sha256 == alice_feb.content_sha256
    total = sum(a.amount for a in result.added)
    s.windows(world["sn1"], MARCH[0], MARCH[1], node=world["fleet"].node, energy_start=10**12)
    s.rebuild(*MARCH)
    period_close(period=march, by=oscar)
    march_statements = Statement.objects.filter(period=march)
    assert sum(st.adjustments_total for st in march_statements) == total
    assert Period.objects.get(pk=world["period"].pk).status == Period.Status.CLOSED


@pytest.mark.django_db
def test_publishing_writes_one_webhook_event_with_the_api_basis_and_disclosure(world, oscar, olga):
    import json

    from api.serializers import BasisSerializer, statement_basis
    from webhooks.models import WebhookEvent

    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["bob"])
    statement_publish_request(statement=statement, by=oscar)
    assert not WebhookEvent.objects.exists()
    with pytest.raises(RuntimeError), transaction.atomic():
        statement_publish_approve(statement=statement, by=olga)
        raise RuntimeError("rolled back")
    assert not WebhookEvent.objects.exists()

    published = statement_publish_approve(statement=statement, by=olga)
    (event,) = WebhookEvent.objects.all()
    assert (event.type, event.owner_ids, event.dedupe_key) == (
        "statement.published",
        [world["bob"].pk],
        f"statement.published:{published.pk}",
    )
    data = event.data["statement"]
    api_basis = json.loads(json.dumps(BasisSerializer(statement_basis(published)).data))
    assert data["basis"] == api_basis
    assert data["disclosure"]["version"] == published.disclosure_version
    assert data["disclosure"]["text_sha256"] == published.disclosure_sha256
    assert data["closing_balance"] == str(published.closing_balance)
    assert data["owner_id"] == str(world["bob"].pk)


@pytest.mark.django_db
def test_reconciling_a_gpu_that_changed_cluster_corrects_both_of_its_lines(oscar, olga, disclosure):
    """SN-9 moves from cluster A to cluster B on the 15th, so its owner's statement has two
    lines for it, one per cluster, over the same ownership run; each cluster's pool is split
    by up seconds with one other GPU. Late telemetry fills a silent hour in each half: each
    of the two lines gets its own adjustment, neither overwrites the other."""
    a = s.fleet()
    cluster_b = Cluster.objects.create(site=a.site, code="b", name="B")
    b = s.Fleet(a.site, cluster_b, Node.objects.create(cluster=cluster_b, hostname="n-b"), a.model)
    moved = dt.datetime(2026, 2, 15, tzinfo=UTC)
    sn9 = s.gpu(a, "SN-9", slot=0)
    Placement.objects.filter(gpu=sn9).update(valid_to=moved)
    Placement.objects.create(gpu=sn9, node=b.node, slot=0, valid_from=moved)
    stays_a, stays_b = s.gpu(a, "SN-A", slot=1), s.gpu(b, "SN-B", slot=1, node=b.node)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    s.own(sn9, alice, 10_000, s.EPOCH)
    s.own(stays_a, bob, 10_000, s.EPOCH)
    s.own(stays_b, bob, 10_000, s.EPOCH)
    period = period_for_month(year=2026, month=2)
    for f in (a, b):
        s.card(f, oscar)
        pool_add(cluster=f.cluster, period=period, amount=D("100.00"), currency="EUR",
                 description="", by=oscar)  # fmt: skip
    start = FEB[0] - dt.timedelta(minutes=1)
    silent = [
        (dt.datetime(2026, 2, 5, 3, tzinfo=UTC), dt.datetime(2026, 2, 5, 4, tzinfo=UTC)),
        (dt.datetime(2026, 2, 20, 3, tzinfo=UTC), dt.datetime(2026, 2, 20, 4, tzinfo=UTC)),
    ]
    s.windows(sn9, start, moved, node=a.node, skip=silent[:1])
    s.windows(sn9, moved, FEB[1], node=b.node, skip=silent[1:], energy_start=10**12)
    s.windows(stays_a, start, FEB[1], node=a.node)
    s.windows(stays_b, start, FEB[1], node=b.node)
    s.rebuild(*FEB)
    period_close(period=period, by=oscar)
    s.publish_all(period, oscar, olga)
    period_close_finish(period=period, by=oscar)
    alice_feb = Statement.objects.get(owner=alice, period=period)
    lines = list(alice_feb.lines.filter(gpu=sn9).order_by("position"))
    assert len(lines) == 2

    # Their counters where they would have been (36 kJ a minute since each half's start).
    minutes = [(silent[0][0] - start) // MINUTE, (silent[1][0] - moved) // MINUTE]
    s.windows(sn9, *silent[0], node=a.node, energy_start=minutes[0] * 36_000_000)
    s.windows(sn9, *silent[1], node=b.node, energy_start=10**12 + minutes[1] * 36_000_000)
    s.rebuild(*FEB)
    added = period_reconcile(period=period, by=oscar).added
    alice_adjustments = sorted((a.corrects_line_id, a.amount) for a in added if a.owner == alice)
    assert [line_id for line_id, _ in alice_adjustments] == sorted(line.pk for line in lines)
    # Each cluster's 100.00 by up seconds: SN-9's 14 days less the silent hour (1,206,000 s)
    # against its neighbour's 28 days (2,419,200 s) is 33.2671 %: 33.27 with the remainder
    # cent; with the hour, 1,209,600 s is 33.3333 %: 33.33 (the cent goes to the neighbour's
    # .67). Gross +0.06; the 10 % fee is 3.33 either way; energy the same (the counter's rise
    # over the gap was counted by the window after it). So +0.06 on each line.
    assert [amount for _, amount in alice_adjustments] == [D("0.06"), D("0.06")]
    assert period_reconcile(period=period, by=oscar).added == []  # and once only


@pytest.mark.django_db
@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE billing_statementline SET net = net + 1, gross = gross + 1 "
        "WHERE statement_id = %s AND position = 1",
        "UPDATE billing_statement SET lines_total = lines_total + 1, "
        "closing_balance = closing_balance + 1 WHERE id = %s",
    ],
)
def test_approval_refuses_a_draft_whose_stored_figures_its_hash_does_not_cover(
    world, oscar, olga, tamper
):
    """A draft is writable; its frozen inputs and hash still say what was computed. A raw
    edit of a line or a total between the request and the approval is not published."""
    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["alice"])
    statement_publish_request(statement=statement, by=oscar)
    with connection.cursor() as cursor:
        cursor.execute(tamper, [statement.pk])
    with pytest.raises(ValidationError, match="does not give the stored hash"):
        statement_publish_approve(statement=statement, by=olga)
    assert Statement.objects.get(pk=statement.pk).status == Statement.Status.PUBLISH_REQUESTED


@pytest.mark.django_db
@pytest.mark.parametrize("step", ["request", "approve"])
def test_publishing_with_unprocessed_telemetry_is_refused_and_changes_nothing(
    world, oscar, olga, step
):
    """A batch that arrived after the close may hold the period's data: neither publishing
    step goes ahead until the workers have processed it."""
    period_close(period=world["period"], by=oscar)
    statement = Statement.objects.get(owner=world["alice"])
    if step == "approve":
        statement = statement_publish_request(statement=statement, by=oscar)
    s.batch_pending(world["fleet"].node, FEB[1] + dt.timedelta(hours=2))
    with pytest.raises(ValidationError, match=r"not processed yet \(1 pending\)"):
        if step == "request":
            statement_publish_request(statement=statement, by=oscar)
        else:
            statement_publish_approve(statement=statement, by=olga)
    unchanged = Statement.objects.get(pk=statement.pk)
    assert unchanged.status == statement.status
    assert (unchanged.requested_by_id, unchanged.approved_by_id) == (
        statement.requested_by_id,
        None,
    )


@pytest.mark.django_db
def test_stored_totals_are_the_sums_of_the_stored_lines(world, oscar):
    """What the close writes, read back: each statement's totals are the sums of its own
    stored GPU and adjustment lines, and its balance adds up from them."""
    from django.db.models import Sum

    from billing.models import StatementLine
    from billing.services.ledger import adjustment_add

    adjustment_add(
        owner=world["bob"], period=world["period"], currency="EUR", amount=D("-12.34"),
        reason="Replaced fan", by=oscar,
    )  # fmt: skip
    period_close(period=world["period"], by=oscar)
    statements = Statement.objects.filter(period=world["period"])
    assert statements.count() == 3
    for st in statements:
        sums = {
            kind: st.lines.filter(kind=kind).aggregate(t=Sum("net"))["t"] or D("0.00")
            for kind in (StatementLine.Kind.GPU, StatementLine.Kind.ADJUSTMENT)
        }
        assert st.lines_total == sums[StatementLine.Kind.GPU]
        assert st.adjustments_total == sums[StatementLine.Kind.ADJUSTMENT]
        assert st.closing_balance == (
            st.opening_balance + st.lines_total + st.adjustments_total - st.payouts_total
        )
    bob = statements.get(owner=world["bob"])
    assert bob.adjustments_total == D("-12.34")
    assert bob.lines.filter(kind=StatementLine.Kind.GPU).count() == 1

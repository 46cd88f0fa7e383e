"""One owner's drafts redrafted with each cluster's pool split as the last whole run froze
it: byte-identical to the whole run's when nothing changed, only that owner's statements
touched, and refused — changing nothing — whenever the split no longer holds for the
owner's GPUs."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from accounts.models import AuditEntry, Owner
from billing.models import Adjustment, PoolRevenue, PoolSplit, Statement
from billing.services import closing as closing_module
from billing.services.closing import (
    owner_statements_recompute,
    period_close,
    period_close_run,
    period_close_start,
)
from billing.services.computing import statements_compute
from billing.services.periods import period_for_month
from billing.services.revenue import pool_add
from fleet.models import Ownership
from tests.accounts.two_factor import console_login
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
HOUR = dt.timedelta(hours=1)


def _world(oscar, disclosure, *, carol_currency: str, pool: bool):
    """One cluster: Alice (EUR) owns SN-1 and half of SN-2, Bob (EUR) the other half and
    SN-3, Carol SN-4. Each GPU was up for a different number of hours (its weight in the
    split). With Carol billed in USD, the cluster's USD card changes mid-month: a cut every
    GPU's cells take, Alice's included (a pool is then refused: Steward converts no
    currencies, and a pool is split over every GPU)."""
    f = s.fleet()
    gpus = [s.gpu(f, f"SN-{n}", slot=n) for n in range(1, 5)]
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    carol = s.owner("Carol Labs Inc", currency=carol_currency)
    s.own(gpus[0], alice, 10_000, s.EPOCH)
    s.own(gpus[1], alice, 5_000, s.EPOCH)
    s.own(gpus[1], bob, 5_000, s.EPOCH)
    s.own(gpus[2], bob, 10_000, s.EPOCH)
    s.own(gpus[3], carol, 10_000, s.EPOCH)
    s.card(f, oscar)
    middle = MARCH[0] + dt.timedelta(days=15)
    if carol_currency == "USD":
        s.card(f, oscar, currency="USD", effective_to=middle)
        s.card(f, oscar, currency="USD", effective_from=middle, price_per_kwh=D("0.25"))
    for hours, gpu in zip((3, 5, 7, 11), gpus, strict=True):
        s.windows(gpu, MARCH[0], MARCH[0] + hours * HOUR, node=f.node)
    s.windows(gpus[0], middle, middle + 2 * HOUR, node=f.node)
    s.rebuild(*MARCH)
    period = period_for_month(year=2026, month=3)
    if pool:
        pool_add(
            cluster=f.cluster,
            period=period,
            amount=D("1000.00"),
            currency="EUR",
            description="",
            by=oscar,
        )
    return {
        "fleet": f,
        "gpus": gpus,
        "alice": alice,
        "bob": bob,
        "carol": carol,
        "period": period,
        "disclosure": disclosure,
    }


@pytest.fixture
def world(oscar, disclosure):
    return _world(oscar, disclosure, carol_currency="EUR", pool=True)


def _stored(period):
    return {
        (str(st.owner_id), st.currency): (st.content_sha256, st.computed_at)
        for st in Statement.objects.filter(period=period)
    }


@pytest.mark.parametrize("currencies", [("EUR",), ("EUR", "USD")])
def test_a_whole_run_freezes_every_split_and_a_redraft_reproduces_its_drafts(
    oscar, disclosure, currencies
):
    world = _world(oscar, disclosure, carol_currency=currencies[-1], pool=len(currencies) == 1)
    period = world["period"]
    period_close(period=period, by=oscar)
    splits = {split.currency: split for split in PoolSplit.objects.filter(period=period)}
    assert tuple(sorted(splits)) == currencies
    gpus = {str(g.pk) for g in world["gpus"]}
    for split in splits.values():
        # Every GPU of the cluster, whoever held it: the parts add up to the pool.
        assert set(split.parts) == gpus
        assert sum(D(part[1]) for part in split.parts.values()) == split.amount
        # Up seconds: 3 + 2, 5, 7 and 11 hours.
        assert {g: part[0] for g, part in split.parts.items()} == {
            str(world["gpus"][0].pk): "18000",
            str(world["gpus"][1].pk): "18000",
            str(world["gpus"][2].pk): "25200",
            str(world["gpus"][3].pk): "39600",
        }
        assert split.total_weight == "100800"
        # Who held each GPU, and a digest of its holdings, to tell when it changed hands.
        sn2 = split.parts[str(world["gpus"][1].pk)]
        assert sn2[2] == sorted([str(world["alice"].pk), str(world["bob"].pk)])
        assert len(sn2[3]) == 32
    assert splits["EUR"].amount == (D("1000.00") if len(currencies) == 1 else D("0.00"))

    whole = statements_compute(period=period, disclosure=disclosure)
    for who in ("alice", "bob", "carol"):
        owner_id = str(world[who].pk)
        alone = statements_compute(
            period=period, disclosure=disclosure, owner_ids=[owner_id], reuse_split=True
        )
        assert alone, who
        for key, draft in alone.items():
            assert key[0] == owner_id
            assert draft.frozen_json == whole[key].frozen_json, who
            assert draft.sha256 == whole[key].sha256, who


@pytest.fixture
def closing(world, oscar):
    period_close(period=world["period"], by=oscar)
    return world


def _transfer_late(world) -> None:
    """Part of SN-2 (Alice and Bob hold it) passed from Alice to Bob on the 20th, recorded
    late (at the data level): the lines change, the GPU's weight does not."""
    sn2, at = world["gpus"][1], MARCH[0] + dt.timedelta(days=20)
    Ownership.objects.filter(gpu=sn2).update(valid_to=at)
    s.own(sn2, world["alice"], 2_500, at)
    s.own(sn2, world["bob"], 7_500, at)


def _whole_run_agrees(world) -> None:
    """Every stored draft is what a whole run would compute now: no owner left behind."""
    whole = statements_compute(period=world["period"], disclosure=world["disclosure"])
    assert {k: v[0] for k, v in _stored(world["period"]).items()} == {
        k: d.sha256 for k, d in whole.items()
    }


def _adjusted(world, by, amount: str) -> None:
    """A correction of Alice's alone (at the data level: the services take adjustments only
    while a period is open)."""
    Adjustment.objects.create(
        owner=world["alice"],
        period=world["period"],
        currency="EUR",
        amount=D(amount),
        reason="Credit for a late start",
        source=Adjustment.Source.MANUAL,
        created_by=by,
    )


def test_a_redraft_writes_that_owners_statements_alone(closing, oscar):
    period, alice = closing["period"], closing["alice"]
    before = _stored(period)
    _adjusted(closing, oscar, "-12.34")

    run = owner_statements_recompute(period=period, owner=alice, by=oscar, reason="shares")
    assert (run.written, run.unchanged, run.removed) == (1, 0, 0)
    after = _stored(period)
    alice_key = (str(alice.pk), "EUR")
    assert after[alice_key][0] != before[alice_key][0]
    assert {k: v for k, v in after.items() if k != alice_key} == {
        k: v for k, v in before.items() if k != alice_key
    }
    # Alice's part of the pool is what the whole run gave: her redraft agrees with Bob's.
    whole = statements_compute(period=period, disclosure=closing["disclosure"])
    assert Statement.objects.get(owner=alice).content_sha256 == whole[alice_key].sha256

    entry = AuditEntry.objects.get(action="billing.owner.recompute")
    assert (entry.actor, entry.reason, entry.object_id) == (oscar, "shares", str(period.pk))
    logged = entry.after or {}
    assert logged["owner_ids"] == [str(alice.pk)]
    assert (logged["written"], logged["unchanged"]) == (1, 0)

    # Again: nothing changed, nothing written.
    again = owner_statements_recompute(period=period, owner=alice, by=oscar)
    assert (again.written, again.unchanged) == (0, 1)
    _whole_run_agrees(closing)


def test_a_redraft_takes_every_holder_of_a_gpu_that_changed_hands(closing, oscar):
    """Part of SN-2 passed from Alice to Bob, recorded late: redrafting Alice redrafts Bob
    too, so neither draft bills SN-2 on shares the other's no longer says."""
    period, alice, bob = closing["period"], closing["alice"], closing["bob"]
    before = _stored(period)
    _transfer_late(closing)
    run = owner_statements_recompute(period=period, owner=alice, by=oscar, reason="shares")
    assert (run.written, run.unchanged, run.removed) == (2, 0, 0)
    after = _stored(period)
    assert {k for k in before if after[k] != before[k]} == {
        (str(alice.pk), "EUR"),
        (str(bob.pk), "EUR"),
    }
    _whole_run_agrees(closing)
    entry = AuditEntry.objects.get(action="billing.owner.recompute")
    assert (entry.after or {})["owner_ids"] == sorted([str(alice.pk), str(bob.pk)])


def test_a_gpu_the_owner_no_longer_holds_takes_its_new_holder(closing, oscar):
    """SN-1, all Alice's, passed wholly to Carol on the 20th: redrafting Alice redrafts Carol,
    the GPU's holder now, and SN-1's part of the pool stays on a draft."""
    period, alice, carol = closing["period"], closing["alice"], closing["carol"]
    sn1, at = closing["gpus"][0], MARCH[0] + dt.timedelta(days=20)
    Ownership.objects.filter(gpu=sn1).update(valid_to=at)
    s.own(sn1, carol, 10_000, at)
    run = owner_statements_recompute(period=period, owner=alice, by=oscar)
    assert run.written == 2
    _whole_run_agrees(closing)


def test_a_gpu_held_by_no_one_since_the_split_is_refused(closing, oscar):
    period, alice = closing["period"], closing["alice"]
    before = _stored(period)
    Ownership.objects.filter(gpu=closing["gpus"][0]).update(valid_to=MARCH[0])
    with pytest.raises(ValidationError, match="GPU SN-1 was in it when the pool was split"):
        owner_statements_recompute(period=period, owner=alice, by=oscar)
    assert _stored(period) == before


def test_a_redraft_is_not_written_over_a_whole_run_made_meanwhile(closing, oscar, monkeypatch):
    """An operator recomputes the whole period while another's redraft of Alice computes:
    the redraft's splits are gone when it writes, so it writes nothing."""
    period, alice = closing["period"], closing["alice"]
    _transfer_late(closing)
    compute = statements_compute

    ran: list[bool] = []

    def whole_run_meanwhile(**kwargs):
        drafts = compute(**kwargs)
        if not ran:  # the redraft's compute: a whole run lands before it writes
            ran.append(True)
            period_close_run(period=period, by=oscar)
        return drafts

    monkeypatch.setattr(closing_module, "statements_compute", whole_run_meanwhile)
    with pytest.raises(ValidationError, match="the pool splits they were computed with are gone"):
        owner_statements_recompute(period=period, owner=alice, by=oscar)
    monkeypatch.undo()
    _whole_run_agrees(closing)


def test_another_owners_gpu_keeps_the_weight_the_run_froze(closing, oscar):
    """Bob's SN-3 gains an hour of up time: Alice's redraft still splits the pool as the run
    did (Bob's drafts were written with that split; a whole recompute brings the change)."""
    period, alice = closing["period"], closing["alice"]
    before = _stored(period)
    sn3 = closing["gpus"][2]
    start = MARCH[0] + dt.timedelta(days=20)
    s.windows(sn3, start, start + HOUR, node=closing["fleet"].node)
    s.rebuild(*MARCH)
    run = owner_statements_recompute(period=period, owner=alice, by=oscar)
    assert (run.written, run.unchanged) == (0, 1)
    assert _stored(period) == before


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("alice_gpu_up", "GPU SN-1 weighs 21600 now, split as weighing 18000"),
        ("pool", "its EUR pool is 1100.00 now, split as 1000.00"),
        ("no_split", "no whole run of the close has split its pool since the close started"),
        ("not_split", "GPU SN-1 was not in it when the pool was split"),
        ("billed", "one of its owners is billed in USD now"),
    ],
)
def test_a_split_that_no_longer_holds_is_refused_and_nothing_changes(closing, oscar, change, why):
    period, alice = closing["period"], closing["alice"]
    if change == "alice_gpu_up":
        start = MARCH[0] + dt.timedelta(days=20)
        s.windows(closing["gpus"][0], start, start + HOUR, node=closing["fleet"].node)
        s.rebuild(*MARCH)
    elif change == "pool":
        # Data-level: the services refuse a pool entered while the period is closing.
        PoolRevenue.objects.filter(period=period, currency="EUR").update(amount=D("1100.00"))
    elif change == "not_split":
        split = PoolSplit.objects.get(period=period)
        del split.parts[str(closing["gpus"][0].pk)]
        split.save()
    elif change == "billed":  # Bob, co-owner of SN-2 with Alice, billed in USD (no pool)
        PoolRevenue.objects.filter(period=period).delete()
        PoolSplit.objects.filter(period=period).update(amount=D("0.00"))
        Owner.objects.filter(pk=closing["bob"].pk).update(billing_currency="USD")
    else:
        PoolSplit.objects.filter(period=period).delete()
    before = _stored(period)
    with pytest.raises(ValidationError) as refused:
        owner_statements_recompute(period=period, owner=alice, by=oscar)
    message = " ".join(refused.value.messages)
    assert why in message, message
    assert "recompute the whole period instead" in message
    assert _stored(period) == before
    assert not AuditEntry.objects.filter(action="billing.owner.recompute").exists()


def test_starting_a_close_removes_an_earlier_closes_splits(world, oscar):
    period = world["period"]
    PoolSplit.objects.create(
        period=period,
        cluster=world["fleet"].cluster,
        currency="EUR",
        pool_basis="up_seconds",
        amount=D("1.00"),
        total_weight="1",
        parts={},
        computed_at=MARCH[1],
    )
    period_close_start(period=period, by=oscar)
    assert not PoolSplit.objects.filter(period=period).exists()
    with pytest.raises(ValidationError, match="no whole run of the close"):
        owner_statements_recompute(period=period, owner=world["alice"], by=oscar)


def test_only_a_closing_period_is_redrafted(world, oscar):
    with pytest.raises(ValidationError, match="drafts are computed while closing"):
        owner_statements_recompute(period=world["period"], owner=world["alice"], by=oscar)


def test_the_console_redrafts_the_selected_statements_owners(closing, oscar):
    period, alice = closing["period"], closing["alice"]
    before = _stored(period)
    _adjusted(closing, oscar, "5.00")
    client = console_login(Client(), oscar)
    statement = Statement.objects.get(owner=alice)
    response = client.post(
        "/admin/billing/statement/",
        {"action": "recompute_owner", "_selected_action": [str(statement.pk)]},
        follow=True,
    )
    assert "1 done." in response.content.decode()
    after = _stored(period)
    changed = {key for key in before if after[key] != before[key]}
    assert changed == {(str(alice.pk), "EUR")}
    assert AuditEntry.objects.filter(action="billing.owner.recompute").count() == 1
    assert period.pk == statement.period_id

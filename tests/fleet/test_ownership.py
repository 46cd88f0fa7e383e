"""Selling, transferring and buying back shares; who held what, to the second."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from accounts.context import request_id_var
from accounts.models import AuditEntry, Owner
from accounts.services import owner_create
from fleet import selectors
from fleet.models import Ownership
from fleet.services.ownership import (
    ShareTo,
    ownership_buy_back,
    ownership_sell,
    ownership_transfer,
)
from tests.fleet.conftest import T

pytestmark = pytest.mark.django_db


@pytest.fixture
def carol_owner(db) -> Owner:
    return owner_create(
        kind=Owner.Kind.PERSON, legal_name="Carla Ruiz", contact_email="c@x.example"
    )


def held(gpu, at):
    return {(h.owner_id, h.share_bps) for h in selectors.ownership_at(gpu=gpu, at=at)}


def test_sell_whole_gpu_then_another_owner_gets_nothing_left(gpu, alice_owner, bob_owner, oscar):
    (row,) = ownership_sell(
        gpus=[gpu], owner=alice_owner, share_bps=10000, at=T(1), reason="Order 17", by=oscar
    )
    assert (row.share_bps, row.valid_from, row.valid_to, row.created_by) == (
        10000,
        T(1),
        None,
        oscar,
    )
    with pytest.raises(ValidationError) as caught:
        ownership_sell(gpus=[gpu], owner=bob_owner, share_bps=1, at=T(2), reason="x", by=oscar)
    assert caught.value.message_dict == {
        "share_bps": [
            "GPU SN0001: only 0 bps are unsold at 2026-03-02T00:00:00Z; cannot sell 1 bps "
            "(shares may add up to at most 10000 bps)."
        ]
    }
    assert Ownership.objects.count() == 1


def test_selling_more_to_a_holder_closes_and_reopens_one_row(gpu, alice_owner, oscar):
    first = ownership_sell(
        gpus=[gpu], owner=alice_owner, share_bps=2500, at=T(1), reason="a", by=oscar
    )[0]
    (second,) = ownership_sell(
        gpus=[gpu], owner=alice_owner, share_bps=2500, at=T(5), reason="b", by=oscar
    )
    first.refresh_from_db()
    assert (first.valid_to, second.share_bps, second.valid_from) == (T(5), 5000, T(5))
    assert held(gpu, T(5)) == {(alice_owner.pk, 5000)}


def test_transfer_at_the_exact_second(gpu, alice_owner, bob_owner, oscar):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=10000, at=T(1), reason="s", by=oscar)
    at = T(10, 12, 0, 0)
    ownership_transfer(
        gpus=[gpu],
        from_owner=alice_owner,
        to=[ShareTo(bob_owner, 10000)],
        at=at,
        reason="Resale, contract 42",
        by=oscar,
    )
    assert held(gpu, at - timedelta(seconds=1)) == {(alice_owner.pk, 10000)}
    assert held(gpu, at) == {(bob_owner.pk, 10000)}
    slices = selectors.ownership_slices(gpu=gpu, start=T(1), end=T(11))
    assert [(s.start, s.end, s.seconds) for s in slices] == [
        (T(1), at, 9 * 86400 + 12 * 3600),
        (at, T(11), 12 * 3600),
    ]
    assert [s.share_of(alice_owner.pk) for s in slices] == [10000, 0]
    assert [s.share_of(bob_owner.pk) for s in slices] == [0, 10000]
    assert Ownership.objects.get(owner=alice_owner).valid_to == at


def test_three_way_split(gpu, alice_owner, bob_owner, carol_owner, oscar):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=10000, at=T(1), reason="s", by=oscar)
    created = ownership_transfer(
        gpus=[gpu],
        from_owner=alice_owner,
        to=[ShareTo(bob_owner, 3000), ShareTo(carol_owner, 2500)],
        at=T(15),
        reason="Split among partners",
        by=oscar,
    )
    assert sorted((r.owner.legal_name, r.share_bps) for r in created) == [
        ("Alice Compute Ltd", 4500),
        ("Bob Chen", 3000),
        ("Carla Ruiz", 2500),
    ]
    (before, after) = selectors.ownership_slices(gpu=gpu, start=T(10), end=T(20))
    assert (before.end, after.start, after.owned_bps, after.operator_bps) == (
        T(15),
        T(15),
        10000,
        0,
    )
    assert {(h.owner_id, h.share_bps) for h in after.holdings} == {
        (alice_owner.pk, 4500),
        (bob_owner.pk, 3000),
        (carol_owner.pk, 2500),
    }


def test_transfer_before_the_holders_start_is_refused_naming_the_holder(
    gpu, alice_owner, bob_owner, oscar
):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=5000, at=T(10), reason="s", by=oscar)
    with pytest.raises(ValidationError) as caught:
        ownership_transfer(
            gpus=[gpu],
            from_owner=alice_owner,
            to=[ShareTo(bob_owner, 1000)],
            at=T(9),
            reason="backdated",
            by=oscar,
        )
    assert caught.value.message_dict == {
        "at": [
            "GPU SN0001: 2026-03-09T00:00:00Z is before 2026-03-10T00:00:00Z, when Alice "
            "Compute Ltd's holding began; ownership changes are recorded in time order, at or "
            "after that instant."
        ]
    }
    assert Ownership.objects.count() == 1


def test_transferring_more_than_held_changes_nothing(gpu, alice_owner, bob_owner, oscar):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=3000, at=T(1), reason="s", by=oscar)
    with pytest.raises(ValidationError, match="holds 3000 bps at 2026-03-05T00:00:00Z; cannot"):
        ownership_transfer(
            gpus=[gpu],
            from_owner=alice_owner,
            to=[ShareTo(bob_owner, 3001)],
            at=T(5),
            reason="r",
            by=oscar,
        )
    assert list(Ownership.objects.values_list("share_bps", "valid_to")) == [(3000, None)]


def test_transfer_from_someone_without_a_share(gpu, alice_owner, bob_owner, oscar):
    with pytest.raises(ValidationError) as caught:
        ownership_transfer(
            gpus=[gpu],
            from_owner=bob_owner,
            to=[ShareTo(alice_owner, 1)],
            at=T(5),
            reason="r",
            by=oscar,
        )
    assert caught.value.message_dict == {
        "from_owner": ["GPU SN0001: Bob Chen holds no share at 2026-03-05T00:00:00Z."]
    }


def test_two_operations_at_one_instant_must_be_one_transfer(
    gpu, alice_owner, bob_owner, carol_owner, oscar
):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=10000, at=T(1), reason="s", by=oscar)
    ownership_transfer(
        gpus=[gpu],
        from_owner=alice_owner,
        to=[ShareTo(bob_owner, 5000)],
        at=T(5),
        reason="r",
        by=oscar,
    )
    with pytest.raises(ValidationError, match="began at exactly 2026-03-05T00:00:00Z"):
        ownership_transfer(
            gpus=[gpu],
            from_owner=alice_owner,
            to=[ShareTo(carol_owner, 1000)],
            at=T(5),
            reason="r",
            by=oscar,
        )


def test_buy_back_part_then_all(gpu, alice_owner, oscar):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=8000, at=T(1), reason="s", by=oscar)
    ownership_buy_back(
        gpus=[gpu], owner=alice_owner, share_bps=3000, at=T(5), reason="partial", by=oscar
    )
    assert held(gpu, T(5)) == {(alice_owner.pk, 5000)}
    assert (
        ownership_buy_back(
            gpus=[gpu], owner=alice_owner, share_bps=None, at=T(8), reason="all", by=oscar
        )
        == []
    )
    assert held(gpu, T(8)) == set()
    slices = selectors.ownership_slices(gpu=gpu, start=T(1), end=T(9))
    assert [(s.start, s.end, s.owned_bps) for s in slices] == [
        (T(1), T(5), 8000),
        (T(5), T(8), 5000),
        (T(8), T(9), 0),
    ]


def test_bulk_sale_is_all_or_nothing(gpu, gpu2, alice_owner, bob_owner, oscar):
    ownership_sell(gpus=[gpu2], owner=bob_owner, share_bps=9000, at=T(1), reason="s", by=oscar)
    with pytest.raises(ValidationError, match="GPU SN0002: only 1000 bps are unsold"):
        ownership_sell(
            gpus=[gpu, gpu2], owner=alice_owner, share_bps=2000, at=T(2), reason="s", by=oscar
        )
    assert Ownership.objects.filter(owner=alice_owner).count() == 0
    created = ownership_sell(
        gpus=[gpu2, gpu], owner=alice_owner, share_bps=1000, at=T(2), reason="bulk", by=oscar
    )
    assert len(created) == 2
    assert AuditEntry.objects.filter(action="ownership.sell", reason="bulk").count() == 2


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"reason": "  "}, "reason", "A reason is required: say why this change is made."),
        ({"share_bps": 0}, "share_bps", "A share is 1 to 10000 bps (10,000 = the whole GPU)."),
        ({"share_bps": 10001}, "share_bps", "A share is 1 to 10000 bps (10,000 = the whole GPU)."),
        (
            {"at": T(1) + timedelta(microseconds=5)},
            "at",
            "2026-03-01T00:00:00.000005Z has a fraction of a second; "
            "changes happen on whole seconds.",
        ),
    ],
)
def test_bad_input_names_the_field(gpu, alice_owner, oscar, kwargs, field, message):
    args = {"gpus": [gpu], "owner": alice_owner, "share_bps": 100, "at": T(1), "reason": "r"}
    with pytest.raises(ValidationError) as caught:
        ownership_sell(**{**args, **kwargs}, by=oscar)
    assert caught.value.message_dict == {field: [message]}


def test_ownership_changes_are_audited_with_before_after_reason_and_request(
    gpu, alice_owner, bob_owner, oscar
):
    ownership_sell(gpus=[gpu], owner=alice_owner, share_bps=6000, at=T(1), reason="Sale", by=oscar)
    token = request_id_var.set("req-123")
    try:
        ownership_transfer(
            gpus=[gpu],
            from_owner=alice_owner,
            to=[ShareTo(bob_owner, 2000)],
            at=T(4),
            reason="Gift",
            by=oscar,
        )
    finally:
        request_id_var.reset(token)
    entry = AuditEntry.objects.get(action="ownership.transfer")
    alice_row = Ownership.objects.get(owner=alice_owner, valid_to__isnull=False)
    assert (entry.actor, entry.reason, entry.request_id) == (oscar, "Gift", "req-123")
    assert (entry.object_type, entry.object_id, entry.object_repr) == (
        "fleet.gpu",
        str(gpu.pk),
        "SN0001",
    )
    assert entry.before == {
        "at": "2026-03-04T00:00:00Z",
        "holdings": [
            {
                "ownership": alice_row.pk,
                "owner": str(alice_owner.pk),
                "owner_name": "Alice Compute Ltd",
                "share_bps": 6000,
                "valid_from": "2026-03-01T00:00:00Z",
            }
        ],
    }
    assert entry.after is not None
    assert [(h["owner_name"], h["share_bps"]) for h in entry.after["holdings"]] == [
        ("Alice Compute Ltd", 4000),
        ("Bob Chen", 2000),
    ]
    assert entry.after["closed"] == [alice_row.pk]


def test_slices_of_a_gpu_nobody_owns_are_the_operators(gpu):
    (only,) = selectors.ownership_slices(gpu=gpu, start=T(1), end=T(2))
    assert (only.start, only.end, only.holdings, only.operator_bps, only.seconds) == (
        T(1),
        T(2),
        (),
        10000,
        86400,
    )

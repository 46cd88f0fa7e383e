"""steward-verify on the published statements of issue 19's part-6 scenarios
(``tests/billing/test_contract_gaps.py``): the verifier, written from docs/accounting.md
alone, agrees with the engine on each — a management fee weighted over two rate cards,
rentals worth fractions of a cent, a GPU in two clusters' pools, and statements that carry
only a balance."""

from __future__ import annotations

import pytest

from billing.models import Statement
from billing.services.closing import period_close_finish
from tests.billing import test_contract_gaps as gaps
from tests.verify import world as w
from tests.verify.test_verify import assert_verifies

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("build", "owners"),
    [
        (gaps.management_change_world, 1),
        (gaps.fractional_cents_world, 2),
        (gaps.moved_pools_world, 3),
    ],
    ids=["a-management-fee-over-two-cards", "b-fractions-of-a-cent", "f-moved-between-pools"],
)
def test_the_part_6_scenarios_verify(build, owners, oscar, olga, disclosure):
    build(oscar)
    statements = w.published(2026, 3, oscar, olga)
    assert len(statements) == owners
    for statement in statements:
        assert statement.status == Statement.Status.PUBLISHED
        assert_verifies(statement)


def test_statements_that_carry_only_a_balance_verify(oscar, olga, disclosure):
    world = gaps.sold_everything_world(oscar, olga)
    march = w.published(2026, 3, oscar, olga)
    period_close_finish(period=world["march"], by=oscar)
    april = w.published(2026, 4, oscar, olga)
    # February: Alice and Carla; March: Alice, Bob, Carla; April: Alice and Bob.
    assert [st.owner.legal_name for st in march] == ["Alice Compute Ltd", "Bob Chen", "Carla Sun"]
    assert [st.owner.legal_name for st in april] == ["Alice Compute Ltd", "Bob Chen"]
    checked = 0
    for statement in Statement.objects.order_by("period__start", "owner__legal_name"):
        export = assert_verifies(statement)
        checked += 1
        if not statement.lines.exists():  # a balance alone: totals and hash still checked
            assert [line for line in export["lines"] if line["kind"] == "gpu"] == []
    assert checked == 2 + 3 + 2

"""Published statements of the billing test scenarios, exported as an owner downloads them."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

from accounts.models import User
from billing.models import Statement
from billing.reports import render_json, statement_report
from billing.services.closing import period_close
from billing.services.periods import period_for_month
from billing.services.revenue import cluster_pool_basis_set, pool_add
from fleet.models import Cluster, Node, Placement
from steward_verify.cli import verify
from tests.billing import scenario as s

UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
MOVE = dt.datetime(2026, 3, 15, 6, 0, tzinfo=UTC)


def exported(statement: Statement) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(render_json(statement_report(statement)))
    return value


def verified(export: dict[str, Any]) -> tuple[int, str]:
    out = io.StringIO()
    code = verify(export, out)
    return code, out.getvalue()


def published(period_year: int, period_month: int, oscar: User, olga: User) -> list[Statement]:
    period = period_for_month(year=period_year, month=period_month)
    period_close(period=period, by=oscar)
    s.publish_all(period, oscar, olga)
    return list(Statement.objects.filter(period=period).order_by("owner__legal_name"))


def worked_example_1(oscar: User, olga: User) -> list[Statement]:
    """docs/accounting.md's worked example: a rental, a transfer at 12:00:30, a pool."""
    world = s.worked_example(oscar)
    pool_add(
        cluster=world["fleet"].cluster,
        period=period_for_month(year=2026, month=3),
        amount=Decimal("100.01"),
        currency="EUR",
        description="March pool",
        by=oscar,
    )
    return published(2026, 3, oscar, olga)


def worked_example_2(oscar: User, olga: User) -> list[Statement]:
    """Worked example 2: an agent restart inside the transfer's minute, pool by busy hours."""
    world = s.worked_example(oscar, change=s.agent_restart_at_transfer)
    cluster_pool_basis_set(
        cluster=world["fleet"].cluster,
        basis="busy_gpu_hours",
        effective_from=dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
        reason="worked example 2",
        by=oscar,
    )
    pool_add(
        cluster=world["fleet"].cluster,
        period=period_for_month(year=2026, month=3),
        amount=Decimal("300.00"),
        currency="EUR",
        description="March pool",
        by=oscar,
    )
    return published(2026, 3, oscar, olga)


def moved_clusters(oscar: User, olga: User) -> list[Statement]:
    """SN-1 (Alice's) moves from cluster A to cluster B on 15 March 06:00; both clusters
    have a pool and a rate card of their own; SN-2 stays in A all month."""
    f = s.fleet()
    moving = s.gpu(f, "SN-1", slot=0)
    staying = s.gpu(f, "SN-2", slot=1)
    alice = s.owner("Alice Compute Ltd")
    s.own(moving, alice, 10_000, s.EPOCH)
    s.own(staying, alice, 5_000, s.EPOCH)
    s.card(f, oscar)
    other = Cluster.objects.create(site=f.site, code="b", name="B")
    node = Node.objects.create(cluster=other, hostname="fra1-b-n01")
    Placement.objects.filter(gpu=moving).update(valid_to=MOVE)
    Placement.objects.create(gpu=moving, node=node, slot=0, valid_from=MOVE)
    s.card(
        s.Fleet(f.site, other, node, f.model),
        oscar,
        hosting_fee_per_gpu_month=Decimal("120.00"),
        price_per_kwh=Decimal("0.25"),
        management_fee_pct=Decimal("12.5"),
    )
    s.windows(moving, MARCH[0] - dt.timedelta(minutes=1), MOVE, node=f.node)
    s.windows(moving, MOVE, MARCH[1], node=node)
    s.windows(staying, MARCH[0] - dt.timedelta(minutes=1), MARCH[1], node=f.node)
    s.rebuild(*MARCH)
    period = period_for_month(year=2026, month=3)
    for cluster, amount in ((f.cluster, "200.00"), (other, "50.00")):
        pool_add(
            cluster=cluster,
            period=period,
            amount=Decimal(amount),
            currency="EUR",
            description="March pool",
            by=oscar,
        )
    return published(2026, 3, oscar, olga)

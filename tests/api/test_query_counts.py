"""Queries per request do not grow with the number of GPUs: every endpoint is called for an
owner with 3 GPUs and again with 30 (each GPU with its incident, maintenance window, payout
and statement line), and must run exactly the same queries — no N+1 anywhere."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import services as accounts
from accounts.models import Owner, User
from accounts.selectors import disclosure_texts_forget
from api.urls import urlpatterns
from billing.models import Payout, Statement, StatementLine
from billing.services.periods import period_for_month
from fleet.models import Incident, IncidentCause, MaintenanceWindow, Node
from tests.api.conftest import ALL_SCOPES, NOW, client_for, key_for
from tests.billing import scenario as s

# Every endpoint, its path (filled from the owner's first things and the statement with as
# many lines as GPUs) and its exact query count. Each request: the key with the accounts it
# may read in each of its scopes (1, api.access.key_for_request), then the endpoint's own.
ENDPOINTS: dict[str, tuple[str, int]] = {
    "owners": ("/api/v1/owners", 2),
    "owner": ("/api/v1/owners/{owner}", 2),
    "gpus": ("/api/v1/gpus", 3),
    "gpu": ("/api/v1/gpus/{gpu}", 3),
    "gpu-ownership": ("/api/v1/gpus/{gpu}/ownership", 4),
    "gpu-series": (
        "/api/v1/gpus/{gpu}/series?start=2026-03-01T00:00:00Z&end=2026-03-02T00:00:00Z&step=hour",
        # Every bucket from the rollups (the facts in two round trips); a few more when some
        # need the engine's cells.
        5,
    ),
    "incidents": ("/api/v1/incidents", 2),
    "incident": ("/api/v1/incidents/{incident}", 2),
    "maintenance": ("/api/v1/maintenance", 2),
    "maintenance-window": ("/api/v1/maintenance/{maintenance}", 2),
    "statements": ("/api/v1/statements", 3),
    "statement": ("/api/v1/statements/{statement}", 4),  # 3 once its lines are cached
    "statement-csv": ("/api/v1/statements/{statement}/csv", 6),
    "statement-pdf": ("/api/v1/statements/{statement}/pdf", 6),
    "payouts": ("/api/v1/payouts", 2),
}
# Served without the database: the schema and its viewers, and the 404 for anything else.
NO_DATABASE = {"schema", "docs", "redoc", "no-such-endpoint"}
# A partner's own webhook endpoints and deliveries: they read no owner's GPUs, so their
# queries cannot grow with them (tests/api/test_webhooks_api.py covers them).
PARTNER_OWN = {
    "webhook-endpoints",
    "webhook-endpoint",
    "webhook-endpoint-rotate-secret",
    "webhook-endpoint-deliveries",
    "webhook-delivery",
    "webhook-delivery-replay",
}


class Holder:
    """Alice's account with ``n`` GPUs, each with its incident, maintenance window, payout,
    and a published statement per size with a line per GPU."""

    def __init__(self, owner: Owner, oscar: User, olga: User) -> None:
        self.owner, self.oscar, self.olga = owner, oscar, olga
        self.fleet = s.fleet("fra1")
        self.gpus: list[Any] = []
        self.incidents: list[Incident] = []
        self.windows: list[MaintenanceWindow] = []
        self.statements: dict[int, Statement] = {}

    def grow_to(self, n: int) -> None:
        for i in range(len(self.gpus), n):
            node = Node.objects.create(cluster=self.fleet.cluster, hostname=f"fra1-a-q{i:03d}")
            gpu = s.gpu(self.fleet, f"SN-Q{i:03d}", slot=0, node=node)
            s.own(gpu, self.owner, 10_000, s.EPOCH)
            self.gpus.append(gpu)
            self.incidents.append(
                Incident.objects.create(
                    gpu=gpu,
                    title=f"Incident {i}",
                    cause=IncidentCause.COOLING,
                    started_at=NOW - dt.timedelta(days=2),
                    ended_at=NOW - dt.timedelta(days=1),
                )
            )
            self.windows.append(
                MaintenanceWindow.objects.create(
                    node=node,
                    title=f"Maintenance {i}",
                    announced_at=NOW - dt.timedelta(days=5),
                    starts_at=NOW + dt.timedelta(days=1),
                    ends_at=NOW + dt.timedelta(days=1, hours=2),
                )
            )
            Payout.objects.create(
                owner=self.owner,
                currency="EUR",
                amount=Decimal("5.00"),
                paid_on=dt.date(2026, 3, 2),
                reference=f"PAY-{i}",
                created_by=self.oscar,
            )
        self.statements[n] = self._statement(month=1 + len(self.statements))

    def _statement(self, *, month: int) -> Statement:
        disclosure = accounts.disclosure_standard_ensure()
        period = period_for_month(year=2026, month=month)
        total = Decimal("10.00") * len(self.gpus)
        statement = Statement.objects.create(
            owner=self.owner,
            period=period,
            currency="EUR",
            opening_balance=Decimal("0.00"),
            lines_total=total,
            adjustments_total=Decimal("0.00"),
            payouts_total=Decimal("0.00"),
            closing_balance=total,
            frozen_inputs={},
            content_sha256=f"{month:064d}",
            disclosure_version=disclosure.version,
            disclosure_sha256=disclosure.text_sha256,
            computed_at=NOW,
        )
        StatementLine.objects.bulk_create(
            StatementLine(
                statement=statement,
                position=i + 1,
                kind=StatementLine.Kind.GPU,
                gpu=gpu,
                starts_at=period.start,
                ends_at=period.end,
                share_bps=10_000,
                gross=Decimal("10.00"),
                net=Decimal("10.00"),
            )
            for i, gpu in enumerate(self.gpus)
        )
        Statement.objects.filter(pk=statement.pk).update(
            status=Statement.Status.PUBLISHED,
            requested_by=self.oscar,
            requested_at=NOW,
            approved_by=self.olga,
            published_at=NOW,
        )
        return statement

    def paths(self, n: int) -> dict[str, str]:
        ids = {
            "owner": self.owner.pk,
            "gpu": self.gpus[0].pk,
            "incident": self.incidents[0].pk,
            "maintenance": self.windows[0].pk,
            "statement": self.statements[n].pk,
        }
        return {name: path.format(**ids) for name, (path, _) in ENDPOINTS.items()}


def _counts(client: Any, paths: dict[str, str]) -> dict[str, int]:
    client.get("/api/v1/owners")  # records the key's last use (once a minute): not counted
    counts = {}
    for name, path in paths.items():
        disclosure_texts_forget()  # counted cold: the first request of a process
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
        assert response.status_code == 200, (path, response.content[:300])
        counts[name] = len(queries)
    return counts


@pytest.mark.parametrize("who", ["partner", "personal"])
def test_queries_per_request_do_not_grow_with_the_gpus(
    who, alice, alice_owner, carol, carol_partner, oscar, olga
):
    holder = Holder(alice_owner, oscar, olga)
    if who == "partner":
        accounts.partner_grant_create(
            owner=alice_owner, partner=carol_partner, scopes=ALL_SCOPES, by=alice
        )
        token = key_for(by=carol, scopes=ALL_SCOPES, partner=carol_partner)
    else:
        accounts.disclosure_acknowledge(  # an owner reads earnings once acknowledged
            user=alice, disclosure=accounts.disclosure_standard_ensure(), ip=None, user_agent="t"
        )
        token = key_for(by=alice, scopes=ALL_SCOPES, owner=alice_owner)
    client = client_for(token)

    holder.grow_to(3)
    small = _counts(client, holder.paths(3))
    holder.grow_to(30)
    large = _counts(client, holder.paths(30))

    expected = {name: count for name, (_, count) in ENDPOINTS.items()}
    assert small == large
    assert large == expected, repr(large)
    # The sizes really differ where they should.
    assert len(client.get("/api/v1/gpus").json()["results"]) == 30
    statement = client.get(f"/api/v1/statements/{holder.statements[30].pk}").json()
    assert len(statement["lines"]) == 30


def test_every_endpoint_of_the_api_is_counted():
    names = {pattern.name for pattern in urlpatterns if pattern.name}
    assert names - NO_DATABASE - PARTNER_OWN == set(ENDPOINTS), (
        "a new API endpoint needs its query count in ENDPOINTS"
    )

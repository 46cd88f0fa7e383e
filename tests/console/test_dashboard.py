"""The console's front page: GPUs by state, stale nodes, incidents with drafts called out,
ingest lag and backlog, and where the close of the period due stands; each panel only for
operators allowed to see it, and a number of queries that does not grow with the fleet."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts import services as accounts
from billing.services.periods import period_for_month
from fleet.models import GpuModel
from fleet.services import access, inventory, operations
from telemetry.services import upkeep
from telemetry.testing import event, fleet_node, window
from tests.accounts.two_factor import console_login
from tests.conftest import PASSWORD
from tests.console.test_incidents_from_events import deliver
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
MINUTE = dt.timedelta(minutes=1)


def text(html: str) -> str:
    """The page's text, tags dropped and whitespace folded, for exact phrases."""
    folded = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()
    return re.sub(r" ([.,;:)])", r"\1", folded)


def row(page: str, label: str) -> str:
    """The figure beside a row heading of a dashboard table."""
    found = re.search(rf"{re.escape(label)} (\S+)", page)
    assert found, label
    return found.group(1)


@pytest.fixture
def fleet(node, post, now, oscar):
    g0, g1 = node.gpus
    silent = fleet_node(gpus=1, hostname="silent-node", placed_from=NOW - dt.timedelta(days=3))
    # The silent node reported 20 minutes ago, then nothing: stale, its GPU no data.
    now.move_to(NOW - 20 * MINUTE)
    deliver(post, silent, [window(silent.gpus[0].nvml_uuid, NOW.replace(second=0) - 21 * MINUTE)])
    now.move_to(NOW)
    last = NOW.replace(second=0) - 2 * MINUTE
    deliver(
        post,
        node,
        [
            window(g0.nvml_uuid, last - MINUTE),
            window(g0.nvml_uuid, last),
            window(g1.nvml_uuid, last - MINUTE),
            window(g1.nvml_uuid, last, state="down", state_reason="xid:79"),
        ],
        [event("xid", last + dt.timedelta(seconds=10), gpu_uuid=g1.nvml_uuid, xid=79)],
    )
    assert [s.node_id for s in upkeep.nodes_mark_stale(now=NOW)] == [str(silent.id)]
    model = GpuModel.objects.get()
    inventory.gpu_register(serial="NEW1", nvml_uuid="GPU-new-1", model=model, by=oscar)
    operations.incident_open(
        scope=node.node,
        title="PDU fault",
        cause="power",
        started_at=NOW.replace(second=0) - 30 * MINUTE,
        by=oscar,
    )
    period_for_month(year=2026, month=10)
    period_for_month(year=2026, month=11)
    return node


def test_the_dashboard_shows_what_an_operator_checks_first(fleet, oscar):
    page = text(console_login(Client(), oscar).get("/admin/").text)
    assert "Operator dashboard" in page and "All times in the console are UTC." in page
    # Fleet: lifecycle states, every one listed.
    assert [row(page, label) for label in ("Received", "Burn-in", "In service", "RMA")] == [
        "1",
        "0",
        "3",
        "0",
    ]
    # Incidents: the draft is called out apart from the confirmed incident.
    assert "1 draft incident awaiting confirmation." in page
    assert "XID 79: GPU has fallen off the bus" in page
    assert "1 open incident (confirmed)." in page and "PDU fault" in page
    # Telemetry now, over the 3 GPUs in service.
    assert "3 GPUs in service" in page
    assert [row(page, s) for s in ("Up", "Degraded", "Down", "No data", "No telemetry yet")] == [
        "1",
        "0",
        "1",
        "1",
        "0",
    ]
    # Ingest: all processed, the silent node stale.
    assert row(page, "Pending batches") == "0" and row(page, "Stale nodes") == "1"
    assert "silent-node" in page and "Ingest health" in page
    # The close: October has ended and is open, its telemetry complete; November runs.
    assert "2026-10 has ended and is open." in page
    assert "Telemetry to the period's end complete" in page
    assert "Running now: 2026-11 (2026-11-01 to 2026-12-01 UTC, open)." in page


def test_the_dashboard_costs_the_same_queries_for_a_bigger_fleet(fleet, oscar):
    operator = console_login(Client(), oscar)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator.get("/admin/").status_code == 200
        return len(captured)

    before = queries()
    fleet_node(gpus=6, hostname="more-gpus")
    assert queries() == before


def test_each_panel_needs_its_permission(fleet):
    staff = accounts.user_create(email="ro@steward.example", password=PASSWORD, is_staff=True)
    staff.groups.add(access.operator_groups_sync()[access.READ_ONLY_OPERATORS])
    page = text(console_login(Client(), staff).get("/admin/").text)
    assert "1 draft incident awaiting confirmation." in page  # fleet views: yes
    assert "GPUs in service, by telemetry now" not in page  # no telemetry permission
    assert "Period close" not in page  # no billing permission

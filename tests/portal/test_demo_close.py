"""`make demo`'s month close on a reduced scale, on real processes: two simulated nodes (one
per cluster) backfill the last two hours of the previous month (steward-agent → live server → Celery
worker → derived pass), then `demo_close_period` enters the demo revenue, closes the month
and publishes its statements, oscar requesting and olga approving."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from billing.models import Period, Statement
from billing.services.publishing import statement_reproduces
from config.demo import month_starts
from portal.demo import demo_agents_prepare, seed_demo

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Eight of Alice's H100s (cluster A, rented by the hour) and the eight H200s Bob owns half of
# (cluster B, paid from a pool). Their scripted faults come later in the month than the two
# hours backfilled here (the lost card on day 9), or leave the GPU up (the XID 94).
NODES = ("fra1-a-n01", "fra1-b-n01")


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_backfilled_month_is_closed_and_published_by_two_operators(
    tmp_path, live_server, celery_worker
):
    seed_demo(password="demo-password-123")
    manifest = [e for e in demo_agents_prepare(agents_dir=tmp_path) if e["hostname"] in NODES]
    previous, current = month_starts(datetime.now(UTC))
    agent = Path(sys.executable).with_name("steward-agent")
    commands = [
        [
            str(agent), "--fake", str(entry["scenario"]), "--server", live_server.url,
            "--key-file", str(entry["key_file"]), "--spool", str(entry["spool"]),
            f"--bootstrap-token={entry['bootstrap_token']}", "--log-level", "WARNING",
            "--backfill-from", _iso(current - timedelta(hours=2)),
            "--backfill-until", _iso(current), "--backfill-batch", "400",
        ]
        for entry in manifest
    ]  # fmt: skip
    agents = [subprocess.Popen(command) for command in commands]
    assert [process.wait(timeout=120) for process in agents] == [0, 0]  # all delivered

    out = StringIO()
    call_command(
        "demo_close_period",
        "--month",
        f"{previous:%Y-%m}",
        "--wait",
        "120",
        "--every",
        "5",
        "--nodes",
        *NODES,
        stdout=out,
    )
    label = f"{previous:%B %Y}"
    assert f"demo: {label} is closed and its 2 statements are published" in out.getvalue()

    period = Period.objects.get(start=previous)
    assert period.status == Period.Status.CLOSED
    statements = {s.owner.legal_name: s for s in period.statements.select_related("owner")}
    assert sorted(statements) == ["Alice Compute Ltd", "Bob Chen"]
    for statement in statements.values():
        assert statement.status == Statement.Status.PUBLISHED
        assert statement.requested_by is not None
        assert statement.approved_by is not None
        assert statement.requested_by.email == "oscar@steward.example"
        assert statement.approved_by.email == "olga@steward.example"
        assert statement_reproduces(statement=statement)
    # Alice's eight GPUs on the node were up for the two backfilled hours, one sample a
    # minute, and rented at EUR 2.10 per GPU-hour: EUR 4.20 each. Her six others were silent.
    lines = statements["Alice Compute Ltd"].lines.filter(kind="gpu").order_by("position")
    up = sorted((line.up_s, line.gross) for line in lines)
    assert up == [(0, Decimal("0.00"))] * 6 + [(7200, Decimal("4.20"))] * 8

    # Bob: his four GPUs in cluster A (two bought before the month, two inside it) were
    # silent; cluster B's USD 38,000.00 pool went to the eight GPUs that were busy, half of
    # each to him, split to the cent per GPU (so within a cent per GPU of half the pool).
    bob = statements["Bob Chen"].lines.filter(kind="gpu")
    assert sorted(line.up_s for line in bob) == [0] * 4 + [7200] * 8
    pool_share = sum(line.gross for line in bob if line.up_s)
    assert abs(pool_share - Decimal("19000.00")) <= Decimal("0.08")

    # Running it again finds the month published and changes nothing.
    again = StringIO()
    call_command("demo_close_period", "--month", f"{previous:%Y-%m}", stdout=again)
    assert "its 2 statements are published" in again.getvalue()
    assert Statement.objects.filter(period=period).count() == 2

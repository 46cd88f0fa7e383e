"""A small fleet with a known November, so portal figures can be asserted exactly.

Now is 2026-11-21 12:00 UTC; the period is November: 492 hours so far.

cluster a, node fra1-a-n01: A1 (slot 0), A2 (slot 1), X (slot 2); cluster b, node fra1-b-n01: B1.
In service since 2026-09-05. alice holds A1 and A2 whole, and held X until Nov 10 00:00, when
she sold it to bob; bob holds half of B1.

A1 telemetry: up all November except down Nov 5 10:00–12:00 and silent Nov 8 00:00–06:00
(no_data); hourly rollups say 50 % utilization, 0.7 kWh (700 W) and 65 °C in every up hour,
and 3,600 s down (no utilization, no energy) in the two down hours. The telemetry covers up to
now: the rollups (from Oct 22) end with the hour before it (no raw windows: the figures come
from the rollups, as the statements read them; its state now from the transitions, each run
ended where the rollups say its telemetry ended).
A2, X and B1 send nothing. Maintenance on cluster a Nov 12 02:00–04:00 (A1 was up then).
Incident on node fra1-b-n01 Nov 15 08:00–09:00 (bob's B1); an open incident on A2 since
Nov 20 10:00.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from accounts.models import Owner, User
from fleet.models import (
    Cluster,
    Gpu,
    GpuModel,
    Incident,
    IncidentCause,
    MaintenanceWindow,
    Node,
    Site,
)
from fleet.services import importing, lifecycle, operations, ownership
from telemetry.models import GpuStateTransition, HourlyRollup

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
NOV = dt.datetime(2026, 11, 1, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def at(day: int, hour: int = 0, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=UTC)


@dataclass
class World:
    a1: Gpu
    a2: Gpu
    x: Gpu
    b1: Gpu
    maintenance: MaintenanceWindow
    node_incident: Incident
    gpu_incident: Incident


def build(*, oscar: User, alice_owner: Owner, bob_owner: Owner, now: dt.datetime = NOW) -> World:
    """The world as of ``now`` (a whole hour): every date moves with it, so browser tests can
    run on the real clock."""
    shift = now - NOW

    def at(day: int, hour: int = 0, month: int = 11) -> dt.datetime:
        return dt.datetime(2026, month, day, hour, tzinfo=UTC) + shift

    site = Site.objects.create(code="fra1", name="Frankfurt 1", country="DE")
    cluster_a = Cluster.objects.create(site=site, code="a", name="Cluster A")
    cluster_b = Cluster.objects.create(site=site, code="b", name="Cluster B")
    Node.objects.create(cluster=cluster_a, hostname="fra1-a-n01")
    node_b = Node.objects.create(cluster=cluster_b, hostname="fra1-b-n01")
    GpuModel.objects.create(name=H100, memory_mib=81559, tdp_w=700)
    received = at(1, 8, month=9).isoformat()
    lines = ["serial,nvml_uuid,model,node,slot,received_at"]
    for serial, node, slot in [
        ("A1", "fra1-a-n01", 0),
        ("A2", "fra1-a-n01", 1),
        ("X", "fra1-a-n01", 2),
        ("B1", "fra1-b-n01", 0),
    ]:
        lines.append(f"{serial},GPU-{serial.lower()}-0000,{H100},{node},{slot},{received}")
    gpus = {
        g.serial: g
        for g in importing.gpu_import_commit(text="\n".join(lines) + "\n", by=oscar, reason="t")
    }
    everyone = list(gpus.values())
    lifecycle.gpus_transition(
        gpus=everyone, state="burn_in", at=at(2, month=9), by=oscar, reason="r"
    )
    lifecycle.gpus_transition(
        gpus=everyone, state="in_service", at=at(5, month=9), by=oscar, reason="ok"
    )
    sold = at(5, month=9)
    ownership.ownership_sell(
        gpus=[gpus["A1"], gpus["A2"], gpus["X"]],
        owner=alice_owner,
        share_bps=10_000,
        at=sold,
        reason="order 1",
        by=oscar,
    )
    ownership.ownership_sell(
        gpus=[gpus["B1"]], owner=bob_owner, share_bps=5_000, at=sold, reason="order 2", by=oscar
    )
    ownership.ownership_transfer(
        gpus=[gpus["X"]],
        from_owner=alice_owner,
        to=[ownership.ShareTo(bob_owner, 10_000)],
        at=at(10),
        reason="alice sold X to bob",
        by=oscar,
    )
    window = operations.maintenance_schedule(
        scope=cluster_a,
        title="PDU firmware update",
        description="Cluster A is drained for two hours.",
        announced_at=at(1, 9),
        starts_at=at(12, 2),
        ends_at=at(12, 4),
        by=oscar,
    )
    node_incident = operations.incident_open(
        scope=node_b,
        title="Fan failure on fra1-b-n01",
        cause=IncidentCause.COOLING,
        started_at=at(15, 8),
        by=oscar,
        notes_for_owners="A chassis fan failed and was replaced.",
        internal_notes="SECRET-INTERNAL vendor ticket 4711",
    )
    operations.incident_close(incident=node_incident, ended_at=at(15, 9), by=oscar)
    gpu_incident = operations.incident_open(
        scope=gpus["A2"],
        title="A2 falls off the bus",
        cause=IncidentCause.HARDWARE,
        started_at=at(20, 10),
        by=oscar,
        notes_for_owners="The card is being reseated.",
    )
    a1 = gpus["A1"]
    GpuStateTransition.objects.bulk_create(
        [
            GpuStateTransition(gpu=a1, state="up", at=at(1, 0, month=10)),
            GpuStateTransition(gpu=a1, state="down", at=at(5, 10), reason="gpu lost"),
            GpuStateTransition(gpu=a1, state="up", at=at(5, 12)),
            GpuStateTransition(gpu=a1, state="no_data", at=at(8, 0)),
            GpuStateTransition(gpu=a1, state="up", at=at(8, 6)),
        ]
    )
    rollups = []
    hour = at(22, 0, month=10)
    while hour < now:
        down = at(5, 10) <= hour < at(5, 12)
        if down:  # the agent reported the GPU down: windows, but no utilization or power
            rollups.append(
                HourlyRollup(
                    gpu=a1,
                    hour=hour,
                    windows=60,
                    seconds_up=0,
                    seconds_degraded=0,
                    seconds_down=3600,
                    util_gpu_seconds=Decimal(0),
                    energy_kwh=Decimal(0),
                    temp_max_c=None,
                    ecc_corrected=0,
                    ecc_uncorrected=0,
                    xid_events=0,
                )
            )
        elif not at(8, 0) <= hour < at(8, 6):
            rollups.append(
                HourlyRollup(
                    gpu=a1,
                    hour=hour,
                    windows=60,
                    seconds_up=3600,
                    seconds_degraded=0,
                    seconds_down=0,
                    util_gpu_seconds=Decimal(180000),
                    energy_kwh=Decimal("0.7"),
                    temp_max_c=65.0,
                    ecc_corrected=0,
                    ecc_uncorrected=0,
                    xid_events=0,
                )
            )
        hour += dt.timedelta(hours=1)
    HourlyRollup.objects.bulk_create(rollups)
    return World(
        a1=a1,
        a2=gpus["A2"],
        x=gpus["X"],
        b1=gpus["B1"],
        maintenance=window,
        node_incident=node_incident,
        gpu_incident=gpu_incident,
    )

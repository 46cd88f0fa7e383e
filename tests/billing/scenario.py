"""Building billing scenarios at the data level: a fleet, GPUs in service, windows by COPY.

Windows go straight into ``telemetry_window`` (binary-free text COPY through Django's own
connection) and hourly rollups are rebuilt from them with the telemetry service, so the
rollups are exactly what the worker would have written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection

from accounts import services as accounts
from accounts.models import Owner, User
from billing.models import Period, Statement
from billing.services.publishing import statement_publish_approve, statement_publish_request
from billing.services.revenue import rate_card_create
from fleet.models import (
    Cluster,
    Gpu,
    GpuModel,
    LifecycleState,
    LifecycleTransition,
    Node,
    Ownership,
    Placement,
    Site,
)
from telemetry.models import IngestBatch
from telemetry.services.derived import rollups_rebuild
from telemetry.services.partitions import window_partitions_ensure

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)
EPOCH = dt.datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class Fleet:
    site: Site
    cluster: Cluster
    node: Node
    model: GpuModel


def fleet(code: str = "fra1") -> Fleet:
    site = Site.objects.create(code=code, name=code.upper(), country="DE")
    cluster = Cluster.objects.create(site=site, code="a", name="A")
    node = Node.objects.create(cluster=cluster, hostname=f"{code}-a-n01")
    model, _ = GpuModel.objects.get_or_create(
        name="NVIDIA H100 80GB HBM3", defaults={"memory_mib": 81559, "tdp_w": 700}
    )
    return Fleet(site, cluster, node, model)


def gpu(
    f: Fleet, serial: str, *, slot: int, since: dt.datetime = EPOCH, node: Node | None = None
) -> Gpu:
    made = Gpu.objects.create(
        nvml_uuid=f"GPU-{serial}",
        serial=serial,
        model=f.model,
        lifecycle_state=LifecycleState.IN_SERVICE,
    )
    Placement.objects.create(gpu=made, node=node or f.node, slot=slot, valid_from=since)
    LifecycleTransition.objects.create(gpu=made, state=LifecycleState.IN_SERVICE, at=since)
    return made


def owner(name: str, currency: str = "EUR") -> Owner:
    return accounts.owner_create(
        kind=Owner.Kind.COMPANY,
        legal_name=name,
        contact_email=f"{name.split()[0].lower()}@owner.example",
        billing_currency=currency,
    )


def own(
    g: Gpu, o: Owner, bps: int, start: dt.datetime, end: dt.datetime | None = None
) -> Ownership:
    return Ownership.objects.create(
        gpu=g, owner=o, share_bps=bps, valid_from=start, valid_to=end, reason="test"
    )


def card(f: Fleet, by: User, **overrides: Any) -> None:
    values: dict[str, Any] = {
        "cluster": f.cluster,
        "currency": "EUR",
        "effective_from": EPOCH,
        "effective_to": None,
        "hosting_fee_per_gpu_month": Decimal("100.00"),
        "price_per_kwh": Decimal("0.20"),
        "pue": Decimal("1.5"),
        "management_fee_pct": Decimal("10"),
        "waive_hosting_in_operator_incidents": False,
        "by": by,
    }
    values.update(overrides)
    rate_card_create(**values)


Minute = dict[str, Any]


def windows(
    g: Gpu,
    start: dt.datetime,
    end: dt.datetime,
    *,
    node: Node,
    state: str = "up",
    util: float | None = 50.0,
    energy_start: int = 0,
    energy_per_minute: int = 36_000_000,  # 36 kJ a minute: 0.01 kWh
    skip: Iterable[tuple[dt.datetime, dt.datetime]] = (),
    change: Callable[[dt.datetime, Minute], Minute] | None = None,
) -> int:
    """Writes one window a minute over ``[start, end)``; the energy counter climbs steadily
    from ``energy_start``. ``change`` may edit any minute's values, among them ``observed``
    (the seconds of the minute the agent observed, ``(from, to)``; 0–60 unless changed).
    Returns the count."""
    skip = list(skip)
    rows = []
    t = start
    counter = energy_start
    while t < end:
        counter += energy_per_minute
        if not any(a <= t < b for a, b in skip):
            values: Minute = {
                "state": state,
                "util": util,
                "energy_mj": counter,
                "observed": (0, 60),
            }
            if change is not None:
                values = change(t, values)
            rows.append(
                (
                    g.pk,
                    t,
                    node.pk,
                    0,
                    12,
                    12,
                    values["state"],
                    values["util"],
                    values["energy_mj"],
                    *values["observed"],
                )
            )
        t += MINUTE
    write_rows(rows)
    return len(rows)


def write_rows(rows: list[tuple[Any, ...]]) -> None:
    """Rows of (gpu, window_start, node, batch, samples ok, expected, state, util, energy),
    optionally followed by (observed_from, observed_to); without them a window observed its
    whole minute, as a v1 agent's."""
    days = {r[1].date() for r in rows}
    window_partitions_ensure(days=days)
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(
            "COPY telemetry_window (gpu_id, window_start, node_id, batch_id, samples_ok, "
            "samples_expected, state, util_gpu_avg, energy_mj, observed_from, observed_to) "
            "FROM STDIN"
        ) as copy,
    ):
        for row in rows:
            copy.write_row(row if len(row) == 11 else (*row, 0, 60))


def rebuild(start: dt.datetime, end: dt.datetime) -> None:
    rollups_rebuild(start=start - dt.timedelta(days=3), end=end + dt.timedelta(days=1))


def publish_all(period: Period, requester: User, approver: User) -> None:
    """Every statement of a closing period published: one operator requests, another approves."""
    for statement in Statement.objects.filter(period=period).order_by("pk"):
        statement_publish_request(statement=statement, by=requester)
        statement_publish_approve(statement=statement, by=approver)


def batch_pending(node: Node, received_at: dt.datetime) -> IngestBatch:
    """A telemetry batch stored but not processed (the batch table's trigger queues it; its
    body is never read): what keeps a close or a publish waiting."""
    return IngestBatch.objects.create(
        node=node,
        batch_id=f"018f0000-0000-7000-8000-{received_at:%m%d%H%M%S}00",
        body_sha256="0" * 64,
        signed_at=received_at - dt.timedelta(hours=2),
        received_at=received_at,
        answer={},
    )


def alice_up_all_month(by: User, start: dt.datetime, end: dt.datetime) -> Gpu:
    """One GPU, Alice's alone, under the standard rate card, up from the minute before
    ``start`` to ``end`` with its rollups built: the smallest world a statement comes from."""
    f = fleet()
    one = gpu(f, "SN-1", slot=0)
    own(one, owner("Alice Compute Ltd"), 10_000, EPOCH)
    card(f, by)
    windows(one, start - dt.timedelta(minutes=1), end, node=f.node)
    rebuild(start, end)
    return one


TRANSFER = dt.datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)


def agent_restart_at_transfer(t: dt.datetime, values: Minute) -> Minute:
    """Worked example 2 of docs/accounting.md: the agent stops at 11:59:35 (its last window
    observed 0–35 s, its counter read then: 25 s of the minute's 36 kJ, 15 kJ, are not in it)
    and a new one starts at 12:00:20, reading 80 % over 20–60 s of that minute; its counter
    is interpolated to 12:01 as usual, so its delta holds the 15 kJ besides its own 36 kJ."""
    if t == dt.datetime(2026, 3, 10, 11, 59, tzinfo=UTC):
        return {**values, "observed": (0, 35), "energy_mj": values["energy_mj"] - 15_000_000}
    if t == dt.datetime(2026, 3, 10, 12, 0, tzinfo=UTC):
        return {**values, "observed": (20, 60), "util": 80.0}
    return values


def worked_example(
    by: User, change: Callable[[dt.datetime, Minute], Minute] | None = None
) -> dict[str, Any]:
    """The worked example of docs/accounting.md, March 2026: SN-1 up all month at 50 %,
    0.01 kWh a minute, rented all month at 2.00 EUR per GPU-hour; Alice holds it until
    2026-03-10 12:00:30, then Bob. Rate card: hosting 100.00 a month, power 0.20 per kWh at
    PUE 1.5, management 10 %. No period row is made. ``change`` edits minutes (as for
    ``windows``): ``agent_restart_at_transfer`` gives worked example 2's telemetry."""
    from billing.services.revenue import rental_create

    march = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
    f = fleet()
    card_gpu = gpu(f, "SN-1", slot=0)
    alice, bob = owner("Alice Compute Ltd"), owner("Bob Chen")
    own(card_gpu, alice, 10_000, EPOCH, TRANSFER)
    own(card_gpu, bob, 10_000, TRANSFER)
    card(f, by)
    # From the last minute of February, so March's first minute has a counter delta too.
    windows(card_gpu, march[0] - dt.timedelta(minutes=1), march[1], node=f.node, change=change)
    rebuild(*march)
    rental_create(
        cluster=f.cluster,
        gpus=[card_gpu],
        starts_at=march[0],
        ends_at=march[1],
        rate_per_gpu_hour=Decimal("2.00"),
        currency="EUR",
        customer_reference="R-1",
        by=by,
    )
    return {"fleet": f, "gpu": card_gpu, "alice": alice, "bob": bob}

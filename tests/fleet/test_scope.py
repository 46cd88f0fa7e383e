"""Maintenance and incidents: scopes resolve to the GPUs placed there at the instant asked."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts.models import AuditEntry
from fleet import selectors
from fleet.models import Incident
from fleet.services import operations, ownership, placement
from tests.fleet.conftest import T

pytestmark = pytest.mark.django_db


@pytest.fixture
def placed(gpu, gpu2, node, node2, oscar):
    placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(2), by=oscar)
    placement.gpu_move(gpu=gpu2, node=node2, slot=0, at=T(2), by=oscar)
    placement.gpu_move(gpu=gpu2, node=node, slot=1, at=T(10), by=oscar)  # moves to cluster a
    return gpu, gpu2


def serials(queryset):
    return sorted(queryset.values_list("serial", flat=True))


def test_each_scope_resolves_at_its_instant(placed, site, cluster, other_cluster, node, node2):
    _gpu, gpu2 = placed
    assert serials(selectors.gpus_affected(site=site, at=T(5))) == ["SN0001", "SN0002"]
    assert serials(selectors.gpus_affected(cluster=cluster, at=T(5))) == ["SN0001"]
    assert serials(selectors.gpus_affected(cluster=cluster, at=T(10))) == ["SN0001", "SN0002"]
    assert serials(selectors.gpus_affected(cluster=other_cluster, at=T(10))) == []
    assert serials(selectors.gpus_affected(node=node2, at=T(9, 23, 59, 59))) == ["SN0002"]
    assert serials(selectors.gpus_affected(gpu=gpu2, at=T(1))) == ["SN0002"]
    assert serials(selectors.gpus_affected(site=site, at=T(1))) == []
    with pytest.raises(ValidationError, match="exactly one"):
        selectors.gpus_affected(site=site, node=node, at=T(5))


def test_maintenance_and_incident_lifecycle_is_audited(placed, cluster, alice_owner, oscar):
    gpu, _ = placed
    ownership.ownership_sell(
        gpus=[gpu], owner=alice_owner, share_bps=5000, at=T(1), reason="s", by=oscar
    )
    window = operations.maintenance_schedule(
        scope=cluster,
        title="PDU swap",
        announced_at=T(1),
        starts_at=T(20, 2),
        ends_at=T(20, 4),
        by=oscar,
    )
    assert serials(selectors.scope_gpus(scoped=window, at=window.starts_at)) == [
        "SN0001",
        "SN0002",
    ]
    assert list(selectors.owners_affected(scoped=window, at=window.starts_at)) == [alice_owner]
    operations.maintenance_cancel(window=window, at=T(19), by=oscar, reason="postponed")
    window.refresh_from_db()
    assert window.cancelled_at == T(19)

    incident = operations.incident_open(
        scope=gpu,
        title="XID 79",
        cause="hardware",
        started_at=T(12, 3, 4, 5),
        by=oscar,
        notes_for_owners="GPU fell off the bus.",
    )
    with pytest.raises(ValidationError) as caught:
        operations.incident_close(incident=incident, ended_at=T(12), by=oscar)
    assert caught.value.message_dict == {
        "ended_at": ["Incident XID 79 started at 2026-03-12T03:04:05Z; it must end after that."]
    }
    operations.incident_close(
        incident=incident, ended_at=T(12, 5), by=oscar, notes_for_owners="Reseated."
    )
    assert Incident.objects.values_list("ended_at", "notes_for_owners").get() == (
        T(12, 5),
        "Reseated.",
    )
    assert list(
        AuditEntry.objects.order_by("id")
        .filter(object_type__in=["fleet.maintenancewindow", "fleet.incident"])
        .values_list("action", flat=True)
    ) == ["maintenance.schedule", "maintenance.cancel", "incident.open", "incident.close"]


def test_maintenance_must_be_announced_before_it_starts(cluster, oscar):
    with pytest.raises(ValidationError) as caught:
        operations.maintenance_schedule(
            scope=cluster, title="x", announced_at=T(5), starts_at=T(4), ends_at=T(6), by=oscar
        )
    assert caught.value.message_dict == {
        "announced_at": ["Maintenance is announced before it starts."]
    }

"""Moving GPUs between nodes and through their lifecycle, dated and audited."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts.models import AuditEntry
from fleet import selectors
from fleet.models import Gpu, LifecycleTransition, Placement
from fleet.services import inventory, lifecycle, placement
from tests.fleet.conftest import T

pytestmark = pytest.mark.django_db


def test_move_keeps_identity_and_dates_history(gpu, node, node2, oscar):
    first = placement.gpu_move(gpu=gpu, node=node, slot=3, at=T(2), by=oscar)
    second = placement.gpu_move(
        gpu=gpu, node=node2, slot=0, at=T(9, 8, 30), by=oscar, reason="rebalance"
    )
    first.refresh_from_db()
    assert (first.valid_to, second.valid_from, second.valid_to) == (T(9, 8, 30), T(9, 8, 30), None)
    assert list(
        Placement.objects.filter(gpu=gpu)
        .order_by("valid_from")
        .values_list("node__hostname", "slot")
    ) == [("fra1-a-n01", 3), ("fra1-b-n01", 0)]
    entry = AuditEntry.objects.filter(action="gpu.move").latest("id")
    assert entry.before is not None and entry.after is not None
    assert (entry.actor, entry.reason, entry.before["placement"]["slot"]) == (oscar, "rebalance", 3)
    assert entry.after["placement"]["hostname"] == "fra1-b-n01"


def test_moving_a_retired_gpu_is_refused(gpu, node, oscar):
    lifecycle.gpus_transition(gpus=[gpu], state="retired", at=T(5), by=oscar, reason="EOL")
    with pytest.raises(ValidationError) as caught:
        placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(6), by=oscar)
    assert caught.value.message_dict == {
        "gpu": ["GPU SN0001 is retired; a retired GPU cannot be moved."]
    }
    assert Placement.objects.count() == 0


def test_slot_taken_out_of_range_and_out_of_order(gpu, gpu2, node, oscar):
    placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(2), by=oscar)
    with pytest.raises(ValidationError) as caught:
        placement.gpu_move(gpu=gpu2, node=node, slot=0, at=T(3), by=oscar)
    assert caught.value.message_dict == {
        "slot": [
            "Slot 0 of fra1-a-n01 holds GPU SN0001 from 2026-03-02T00:00:00Z; "
            "move that GPU out first."
        ]
    }
    with pytest.raises(ValidationError, match="has slots 0 to 7; 8 is not one of them"):
        placement.gpu_move(gpu=gpu2, node=node, slot=8, at=T(3), by=oscar)
    with pytest.raises(ValidationError, match="last changed place at 2026-03-02T00:00:00Z"):
        placement.gpu_move(gpu=gpu, node=node, slot=1, at=T(2), by=oscar)


def test_unplace_then_the_slot_is_free(gpu, gpu2, node, oscar):
    placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(2), by=oscar)
    placement.gpu_unplace(gpu=gpu, at=T(4), by=oscar, reason="RMA shipment")
    placement.gpu_move(gpu=gpu2, node=node, slot=0, at=T(4), by=oscar)
    assert Placement.objects.filter(valid_to__isnull=True).get().gpu == gpu2


def test_lifecycle_transitions_are_checked_dated_and_mirrored(gpu, node, oscar):
    lifecycle.gpus_transition(gpus=[gpu], state="burn_in", at=T(2), by=oscar)
    with pytest.raises(ValidationError) as caught:
        lifecycle.gpus_transition(gpus=[gpu], state="received", at=T(3), by=oscar)
    assert caught.value.message_dict == {
        "state": ["GPU SN0001 is burn-in; it cannot go to received from there."]
    }
    with pytest.raises(ValidationError, match="last changed state at 2026-03-02T00:00:00Z"):
        lifecycle.gpus_transition(gpus=[gpu], state="in_service", at=T(2), by=oscar)
    lifecycle.gpus_transition(gpus=[gpu], state="in_service", at=T(3), by=oscar)
    gpu.refresh_from_db()
    assert gpu.lifecycle_state == "in_service"
    assert list(LifecycleTransition.objects.filter(gpu=gpu).values_list("state", "at")) == [
        ("received", T(1)),
        ("burn_in", T(2)),
        ("in_service", T(3)),
    ]


def test_retiring_takes_the_gpu_out_of_its_node(gpu, node, oscar):
    placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(2), by=oscar)
    lifecycle.gpus_transition(gpus=[gpu], state="retired", at=T(7), by=oscar, reason="EOL")
    assert Placement.objects.get().valid_to == T(7)
    with pytest.raises(ValidationError, match="is retired; it cannot go to in service"):
        lifecycle.gpus_transition(gpus=[gpu], state="in_service", at=T(8), by=oscar)


def test_in_service_intervals_are_exact_and_clipped(in_service_gpu, oscar):
    gpu = in_service_gpu
    lifecycle.gpus_transition(gpus=[gpu], state="maintenance", at=T(10, 6), by=oscar)
    lifecycle.gpus_transition(gpus=[gpu], state="in_service", at=T(10, 9, 30), by=oscar)
    intervals = selectors.in_service_intervals(gpu=gpu, start=T(1), end=T(1, month=4))
    assert [(i.start, i.end) for i in intervals] == [
        (T(3), T(10, 6)),
        (T(10, 9, 30), T(1, month=4)),
    ]
    clipped = selectors.in_service_intervals(gpu=gpu, start=T(10, 7), end=T(10, 10))
    assert [(i.start, i.end, i.seconds) for i in clipped] == [(T(10, 9, 30), T(10, 10), 1800)]


def test_register_and_edit_are_audited_and_state_is_guarded(h100, oscar):
    gpu = inventory.gpu_register(
        serial="SNX", nvml_uuid="GPU-x", model=h100, by=oscar, received_at=T(1)
    )
    gpu.serial = "SNY"
    inventory.record_save(obj=gpu, by=oscar, reason="typo in serial")
    entry = AuditEntry.objects.get(action="gpu.update")
    assert (entry.before, entry.after, entry.reason) == (
        {"serial": "SNX"},
        {"serial": "SNY"},
        "typo in serial",
    )
    gpu.lifecycle_state = "in_service"
    with pytest.raises(ValidationError, match="lifecycle_state changes only through"):
        inventory.record_save(obj=gpu, by=oscar)
    assert Gpu.objects.get().lifecycle_state == "received"
    with pytest.raises(ValidationError) as caught:
        inventory.gpu_register(serial="SNY", nvml_uuid="GPU-z", model=h100, by=oscar)
    assert "serial" in caught.value.message_dict

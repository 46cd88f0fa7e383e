"""CSV import: a preview that names every bad row and field; commit all or nothing."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts.models import AuditEntry
from fleet.models import Gpu, LifecycleTransition, Placement
from fleet.services.importing import gpu_import_commit, gpu_import_preview
from tests.fleet.conftest import T

pytestmark = pytest.mark.django_db

GOOD = (
    "serial,nvml_uuid,model,node,slot,received_at\n"
    "SN0101,GPU-aaaa-0101,NVIDIA H100 80GB HBM3,fra1-a-n01,0,2026-03-01T09:00:00Z\n"
    "SN0102,GPU-aaaa-0102,NVIDIA H100 80GB HBM3,fra1-a-n01,1,2026-03-01T09:00:00+01:00\n"
    "SN0103,GPU-aaaa-0103,NVIDIA H100 80GB HBM3,,,\n"
)


def test_good_file_previews_clean_and_commits_in_bulk(
    h100, node, oscar, django_assert_max_num_queries
):
    preview = gpu_import_preview(text=GOOD, now=T(5))
    assert preview.ok and preview.error_lines() == []
    assert [(r.line, r.serial, r.slot, r.received_at) for r in preview.rows] == [
        (2, "SN0101", 0, T(1, 9)),
        (3, "SN0102", 1, T(1, 8)),
        (4, "SN0103", None, T(5)),
    ]
    with django_assert_max_num_queries(12):
        gpus = gpu_import_commit(text=GOOD, by=oscar, reason="Delivery 2026-03")
    assert [g.serial for g in gpus] == ["SN0101", "SN0102", "SN0103"]
    assert Gpu.objects.count() == 3
    assert LifecycleTransition.objects.filter(state="received").count() == 3
    assert list(
        Placement.objects.order_by("slot").values_list("gpu__serial", "slot", "valid_from")
    ) == [
        ("SN0101", 0, T(1, 9)),
        ("SN0102", 1, T(1, 8)),
    ]
    entries = AuditEntry.objects.filter(action="gpu.import").order_by("object_repr")
    assert [(e.object_repr, e.actor, e.reason, (e.after or {})["line"]) for e in entries] == [
        ("SN0101", oscar, "Delivery 2026-03", 2),
        ("SN0102", oscar, "Delivery 2026-03", 3),
        ("SN0103", oscar, "Delivery 2026-03", 4),
    ]


def test_bad_file_names_every_row_and_field_and_writes_nothing(h100, node, gpu, oscar):
    bad = (
        "serial,nvml_uuid,model,node,slot\n"
        "SN0201,GPU-b-1,NVIDIA H100 80GB HBM3,fra1-a-n01,0\n"
        "SN0201,GPU-b-2,NVIDIA H1OO,fra1-a-n01,0\n"
        "SN0001,GPU-b-3,NVIDIA H100 80GB HBM3,nowhere,1\n"
        ",GPU-b-4,NVIDIA H100 80GB HBM3,fra1-a-n01,9\n"
    )
    preview = gpu_import_preview(text=bad)
    assert not preview.ok
    assert preview.error_lines() == [
        "Line 2: serial SN0201 appears more than once in the file.",
        "Line 3: serial SN0201 duplicates line 2.",
        "Line 3: model 'NVIDIA H1OO' is not in the catalog; known: NVIDIA H100 80GB HBM3.",
        "Line 3: slot 0 of fra1-a-n01 is also used on line 2.",
        "Line 4: serial SN0001 is already registered.",
        "Line 4: node 'nowhere' does not exist.",
        "Line 5: serial is empty.",
        "Line 5: slot 9 does not exist on fra1-a-n01 (0 to 7).",
    ]
    with pytest.raises(ValidationError) as caught:
        gpu_import_commit(text=bad, by=oscar)
    assert caught.value.message_dict["file"] == preview.error_lines()
    assert Gpu.objects.count() == 1
    assert AuditEntry.objects.filter(action="gpu.import").count() == 0


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("", ["The file is empty; it needs a header row."]),
        ("serial,model\nA,B\n", ["Header: missing column(s) nvml_uuid."]),
        (
            "serial,nvml_uuid,model,colour\n",
            [
                "Header: unknown column(s) colour; known: serial, nvml_uuid, model, node, slot, "
                "received_at."
            ],
        ),
        ("serial,nvml_uuid,model\n", ["The file has a header but no GPUs."]),
    ],
)
def test_file_level_errors(h100, text, errors):
    assert gpu_import_preview(text=text).error_lines() == errors


def test_slot_already_held_and_bad_instants(h100, node, gpu, oscar):
    from fleet.services import placement

    placement.gpu_move(gpu=gpu, node=node, slot=2, at=T(2), by=oscar)
    text = (
        "serial,nvml_uuid,model,node,slot,received_at\n"
        "SN1,U1,NVIDIA H100 80GB HBM3,fra1-a-n01,2,\n"
        "SN2,U2,NVIDIA H100 80GB HBM3,,,2026-03-01 09:00\n"
        "SN3,U3,NVIDIA H100 80GB HBM3,fra1-a-n01,x,yesterday\n"
    )
    assert gpu_import_preview(text=text).error_lines() == [
        "Line 2: slot 2 of fra1-a-n01 holds GPU SN0001 since 2026-03-02T00:00:00Z.",
        "Line 3: received_at '2026-03-01 09:00' has no offset; write e.g. 2026-03-01T09:00:00Z.",
        "Line 4: received_at 'yesterday' is not an ISO 8601 instant.",
        "Line 4: slot 'x' is not a whole number.",
    ]

"""The operator console: every page answers operators and refuses owners; actions call the
services; big lists stay at a fixed number of queries."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib import admin
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts import services as accounts
from accounts.models import AuditEntry, User
from fleet.models import Gpu, Incident, Ownership, Placement
from fleet.services import access, lifecycle, operations, ownership, placement
from tests.accounts.two_factor import console_login
from tests.conftest import PASSWORD
from tests.fleet.conftest import T, make_gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_data(gpu, gpu2, node, node2, cluster, alice_owner, bob_owner, oscar, carol):
    placement.gpu_move(gpu=gpu, node=node, slot=0, at=T(2), by=oscar)
    placement.gpu_move(gpu=gpu2, node=node2, slot=0, at=T(2), by=oscar)
    lifecycle.gpus_transition(gpus=[gpu, gpu2], state="in_service", at=T(3), by=oscar)
    ownership.ownership_sell(
        gpus=[gpu], owner=alice_owner, share_bps=10000, at=T(3), reason="sale", by=oscar
    )
    ownership.ownership_sell(
        gpus=[gpu2], owner=bob_owner, share_bps=5000, at=T(3), reason="sale", by=oscar
    )
    operations.maintenance_schedule(
        scope=cluster, title="PDU", announced_at=T(3), starts_at=T(20), ends_at=T(21), by=oscar
    )
    operations.incident_open(scope=node, title="Fan", cause="cooling", started_at=T(5), by=oscar)
    return gpu, gpu2


@pytest.fixture
def operator(client: Client, oscar: User) -> Client:
    return console_login(client, oscar)


def _staff(email: str, group: str) -> User:
    user = accounts.user_create(email=email, password=PASSWORD, is_staff=True)
    user.groups.add(access.operator_groups_sync()[group])
    return user


@pytest.fixture
def read_only(db) -> Client:
    return console_login(Client(), _staff("ro@steward.example", access.READ_ONLY_OPERATORS))


def console_urls() -> list[str]:
    """Every page of the console: index, app indexes, each model's list, add and change
    pages (for one row of each), and the fleet's own pages."""
    urls = ["/admin/", "/admin/2fa/recovery-codes/"]
    for model, model_admin in admin.site._registry.items():
        info = (model._meta.app_label, model._meta.model_name)
        urls.append(reverse("admin:app_list", args=[info[0]]))
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        if model_admin.has_add_permission(_superuser_request()):
            urls.append(reverse("admin:{}_{}_add".format(*info)))
        row = model._default_manager.order_by("pk").first()
        if row is not None:
            urls.append(reverse("admin:{}_{}_change".format(*info), args=[row.pk]))
            urls.append(reverse("admin:{}_{}_history".format(*info), args=[row.pk]))
    gpu = Gpu.objects.order_by("serial").first()
    assert gpu is not None
    urls += [
        "/admin/fleet/gpu/import/",
        "/admin/fleet/gpu/export/",
        f"/admin/fleet/gpu/{gpu.pk}/move/",
        f"/admin/fleet/gpu/{gpu.pk}/ownership/sell/",
        f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/",
        f"/admin/fleet/gpu/{gpu.pk}/ownership/buy_back/",
    ]
    return sorted(set(urls))


def _superuser_request():
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = User(is_superuser=True, is_staff=True, is_active=True)
    return request


def test_every_console_page_answers_an_operator_and_refuses_an_owner(fleet_data, operator, alice):
    urls = console_urls()
    # The fleet's and accounts' models are all there, with a row each.
    for name in ("gpu", "ownership", "placement", "incident", "maintenancewindow", "auditentry"):
        assert any(f"/{name}/" in url and url.endswith("/change/") for url in urls), name
    answers = {url: operator.get(url).status_code for url in urls}
    assert {url: code for url, code in answers.items() if code != 200} == {}

    owner = Client()
    owner.force_login(alice)
    refused = {url: owner.get(url).status_code for url in urls}
    assert {url: code for url, code in refused.items() if code not in (302, 403)} == {}


def test_gpu_page_shows_its_whole_history(fleet_data, operator):
    gpu, _ = fleet_data
    page = operator.get(f"/admin/fleet/gpu/{gpu.pk}/change/").text
    assert "fra1-a-n01" in page and "Alice Compute Ltd" in page
    assert "ownership.sell" in page and "gpu.move" in page and "In service" in page


def test_gpu_list_searches_serial_uuid_and_owner_and_filters(
    fleet_data, operator, cluster, alice_owner
):
    def listed(query: str) -> list[str]:
        page = operator.get(f"/admin/fleet/gpu/?{query}").text
        return [s for s in ("SN0001", "SN0002") if f">{s}<" in page]

    assert listed("q=SN0002") == ["SN0002"]
    assert listed("q=0000-000000000001") == ["SN0001"]
    assert listed("q=alice") == ["SN0001"]
    assert listed(f"cluster={cluster.pk}") == ["SN0001"]
    assert listed(f"owner={alice_owner.pk}") == ["SN0001"]
    assert listed("lifecycle_state__exact=in_service") == ["SN0001", "SN0002"]


def test_gpu_changelist_queries_do_not_grow_with_rows(h100, node, operator, alice_owner, oscar):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator.get("/admin/fleet/gpu/").status_code == 200
        return len(captured)

    gpus = [make_gpu(h100, n) for n in range(10, 15)]
    ownership.ownership_sell(
        gpus=gpus, owner=alice_owner, share_bps=5000, at=T(2), reason="s", by=oscar
    )
    few = queries()
    more = [make_gpu(h100, n) for n in range(20, 60)]
    for slot, gpu in enumerate(more[:8]):
        placement.gpu_move(gpu=gpu, node=node, slot=slot, at=T(2), by=oscar)
    assert queries() == few
    assert few <= 12


def test_transfer_action_calls_the_service_with_reason_and_time(
    fleet_data, operator, alice_owner, bob_owner
):
    gpu, _ = fleet_data
    response = operator.post(
        "/admin/fleet/gpu/",
        {
            "action": "transfer_share",
            "_selected_action": [gpu.pk],
            "apply": "1",
            "from_owner": alice_owner.pk,
            "to_owner_1": bob_owner.pk,
            "share_bps_1": 2500,
            "at": "2026-03-10 12:00:00",
            "reason": "Resale",
        },
        headers={"X-Request-ID": "req-console-1"},
    )
    assert response.status_code == 302
    assert set(
        Ownership.objects.filter(gpu=gpu, valid_to__isnull=True).values_list("owner", "share_bps")
    ) == {(alice_owner.pk, 7500), (bob_owner.pk, 2500)}
    entry = AuditEntry.objects.get(action="ownership.transfer")
    assert entry.actor is not None
    assert (entry.reason, entry.request_id, entry.actor.email) == (
        "Resale",
        "req-console-1",
        "oscar@steward.example",
    )


def test_transfer_form_shows_service_errors_on_the_fields(
    fleet_data, operator, alice_owner, bob_owner
):
    gpu, _ = fleet_data
    response = operator.post(
        f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/",
        {
            "apply": "1",
            "from_owner": bob_owner.pk,
            "to_owner_1": alice_owner.pk,
            "share_bps_1": 100,
            "at": "2026-03-10 12:00:00",
            "reason": "",
        },
    )
    assert response.status_code == 200
    assert "This field is required." in response.text  # the reason
    response = operator.post(
        f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/",
        {
            "apply": "1",
            "from_owner": bob_owner.pk,
            "to_owner_1": alice_owner.pk,
            "share_bps_1": 100,
            "at": "2026-03-10 12:00:00",
            "reason": "r",
        },
    )
    assert "GPU SN0001: Bob Chen holds no share at 2026-03-10T12:00:00Z." in response.text
    assert Ownership.objects.filter(gpu=gpu).count() == 1


def test_move_page_moves_and_refuses_a_taken_slot(fleet_data, operator, node, node2):
    gpu, _gpu2 = fleet_data
    taken = operator.post(
        f"/admin/fleet/gpu/{gpu.pk}/move/",
        {"apply": "1", "node": node2.pk, "slot": 0, "at": "2026-03-09 00:00:00", "reason": ""},
    )
    assert "Slot 0 of fra1-b-n01 holds GPU SN0002" in taken.text
    moved = operator.post(
        f"/admin/fleet/gpu/{gpu.pk}/move/",
        {"apply": "1", "node": node2.pk, "slot": 5, "at": "2026-03-09 00:00:00", "reason": ""},
    )
    assert moved.status_code == 302
    assert Placement.objects.get(gpu=gpu, valid_to__isnull=True).slot == 5


def test_close_incident_action(fleet_data, operator):
    incident = Incident.objects.get()
    response = operator.post(
        "/admin/fleet/incident/",
        {
            "action": "close",
            "_selected_action": [incident.pk],
            "apply": "1",
            "ended_at": "2026-03-05 06:00:00",
            "notes_for_owners": "Fan replaced.",
        },
    )
    assert response.status_code == 302
    incident.refresh_from_db()
    assert (incident.ended_at, incident.notes_for_owners) == (T(5, 6), "Fan replaced.")


def test_open_incident_from_the_add_form(fleet_data, operator, node):
    response = operator.post(
        "/admin/fleet/incident/add/",
        {
            "node": node.pk,
            "title": "Power feed B lost",
            "cause": "power",
            "started_at_0": "2026-03-06",
            "started_at_1": "01:02:03",
            "notes_for_owners": "",
            "internal_notes": "",
        },
    )
    assert response.status_code == 302, response.text
    assert AuditEntry.objects.filter(
        action="incident.open", object_repr="Power feed B lost"
    ).exists()


def test_import_preview_then_commit_through_the_console(h100, node, operator):
    bad = b"serial,nvml_uuid,model\nSN9,U9,Nope\n"
    page = operator.post(
        "/admin/fleet/gpu/import/", {"file": SimpleUploadedFile("g.csv", bad, "text/csv")}
    )
    assert "model &#x27;Nope&#x27; is not in the catalog" in page.text
    assert 'name="confirm"' not in page.text
    good = b"serial,nvml_uuid,model,node,slot\nSN9,U9,NVIDIA H100 80GB HBM3,fra1-a-n01,4\n"
    page = operator.post(
        "/admin/fleet/gpu/import/", {"file": SimpleUploadedFile("g.csv", good, "text/csv")}
    )
    assert 'name="confirm"' in page.text and Gpu.objects.count() == 0
    done = operator.post(
        "/admin/fleet/gpu/import/",
        {"confirm": "1", "csv_text": good.decode(), "reason": "Delivery 7"},
    )
    assert done.status_code == 302
    assert Placement.objects.get().gpu.serial == "SN9"


def test_export_streams_the_inventory(fleet_data, operator):
    response = operator.get("/admin/fleet/gpu/export/")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows == [
        [
            "serial",
            "nvml_uuid",
            "model",
            "lifecycle_state",
            "site",
            "cluster",
            "node",
            "slot",
            "owners",
        ],
        [
            "SN0001",
            "GPU-00000000-0000-0000-0000-000000000001",
            "NVIDIA H100 80GB HBM3",
            "in_service",
            "fra1",
            "a",
            "fra1-a-n01",
            "0",
            "Alice Compute Ltd: 10000",
        ],
        [
            "SN0002",
            "GPU-00000000-0000-0000-0000-000000000002",
            "NVIDIA H100 80GB HBM3",
            "in_service",
            "fra1",
            "b",
            "fra1-b-n01",
            "0",
            "Bob Chen: 5000",
        ],
    ]


def test_read_only_operator_sees_but_cannot_change_ownership(
    fleet_data, read_only, alice_owner, bob_owner
):
    gpu, _ = fleet_data
    assert read_only.get("/admin/fleet/gpu/").status_code == 200
    page = read_only.get(f"/admin/fleet/gpu/{gpu.pk}/change/")
    assert page.status_code == 200 and "Transfer share" not in page.text
    assert read_only.get(f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/").status_code == 403
    assert read_only.get("/admin/fleet/gpu/import/").status_code == 403
    response = read_only.post(
        "/admin/fleet/gpu/",
        {
            "action": "transfer_share",
            "_selected_action": [gpu.pk],
            "apply": "1",
            "from_owner": alice_owner.pk,
            "to_owner_1": bob_owner.pk,
            "share_bps_1": 1,
            "at": "2026-03-10 12:00:00",
            "reason": "x",
        },
    )
    assert response.status_code in (200, 302)
    assert Ownership.objects.filter(gpu=gpu).count() == 1


def test_ownership_officer_may_transfer(fleet_data, alice_owner, bob_owner):
    gpu, _ = fleet_data
    officer = console_login(Client(), _staff("own@steward.example", access.OWNERSHIP_OFFICERS))
    page = officer.get(f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/")
    assert page.status_code == 200
    fleet_only = console_login(Client(), _staff("fl@steward.example", access.FLEET_OPERATORS))
    assert fleet_only.get(f"/admin/fleet/gpu/{gpu.pk}/ownership/transfer/").status_code == 403
    assert fleet_only.get(f"/admin/fleet/gpu/{gpu.pk}/move/").status_code == 200


def test_ownership_rows_cannot_be_edited_in_the_console(fleet_data, operator):
    row = Ownership.objects.order_by("pk").first()
    assert row is not None
    assert operator.get("/admin/fleet/ownership/add/").status_code == 403
    response = operator.post(f"/admin/fleet/ownership/{row.pk}/change/", {"share_bps": 1})
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.share_bps == 10000


def test_operator_groups_command_is_idempotent():
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("sync_operator_groups", stdout=out)
    call_command("sync_operator_groups", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[:4] == lines[4:]
    assert lines[0] == "Operators: read-only: 14 permissions"
    assert lines[2] == "Operators: ownership: 33 permissions"
    # read-only's 14, 9 billing views, 6 billing adds, closing and publishing.
    assert lines[3] == "Operators: billing: 32 permissions"


def test_unfiltered_big_lists_are_counted_from_the_planner_estimate(h100, monkeypatch):
    from accounts import admin_toolkit
    from fleet.admin import base

    assert base.BigTableAdmin.paginator is admin_toolkit.HonestCountPaginator  # one base
    for n in range(3):
        make_gpu(h100, 100 + n)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE fleet_gpu")
    monkeypatch.setattr(admin_toolkit, "COUNT_CAP", 0)
    with CaptureQueriesContext(connection) as captured:
        whole = admin_toolkit.HonestCountPaginator(Gpu.objects.all(), 100)
        assert (whole.count, whole.count_kind) == (3, "about")
    assert "reltuples" in captured[0]["sql"] and len(captured) == 1
    filtered = Gpu.objects.filter(serial="SN0100")
    with CaptureQueriesContext(connection) as captured:
        found = admin_toolkit.HonestCountPaginator(filtered, 100)
        assert (found.count, found.count_kind) == (0, "more_than")
    assert "COUNT(*)" in captured[0]["sql"]


def test_a_refused_edit_shows_the_form_again_with_the_services_words(
    fleet_data, operator, site, monkeypatch
):
    """The console toolkit's rule for fleet's edit pages too: the service refuses, the page
    comes back with its message on the field, and nothing is written (it was a 500)."""
    from django.core.exceptions import ValidationError

    from fleet.admin import base

    def refuse(**kw):
        raise ValidationError({"name": "Refused by the service: say why."})

    monkeypatch.setattr(base, "record_save", refuse)
    response = operator.post(
        f"/admin/fleet/site/{site.pk}/change/",
        {"code": site.code, "name": "Renamed", "country": site.country, "time_zone": "UTC"},
    )
    assert response.status_code == 200
    assert "Refused by the service: say why." in response.text
    site.refresh_from_db()
    assert site.name != "Renamed"
    assert not AuditEntry.objects.filter(action="site.update").exists()

"""The GPU list reads its rows in plain SQL (``api.access.GpuRows``); the annotated queryset of
``gpus_for_caller`` is the reference. Every filter, both orderings in both directions, and
pages walked forwards and back must give the same GPUs, in the same order, with the same
values."""

from __future__ import annotations

import datetime as dt
from itertools import product
from typing import Any

import pytest
from rest_framework.test import APIRequestFactory

from accounts import services as accounts
from accounts.models import ApiScope
from api import access
from api.access import GPU_ROW_COLUMNS
from api.views import GpuList
from fleet.models import Cluster, Gpu, GpuModel, LifecycleState, Node, Placement
from telemetry.models import GpuStateTransition
from tests.api.conftest import ALL_SCOPES, NOW, client_for
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db

DAY = dt.timedelta(days=1)


@pytest.fixture
def fleet(world, bob):
    """Sixteen more GPUs over two sites and three clusters, two models, every kind of holding
    (A's, B's, shared, sold, bought later, another owner's only), some unplaced, moved or
    moving tomorrow, some with a state now and some only in the future, and runs of equal
    ``created_at``."""
    lon = s.fleet("lon1")
    other_cluster = Cluster.objects.create(site=lon.site, code="b", name="B")
    other_node = Node.objects.create(cluster=other_cluster, hostname="lon1-b-n01")
    small, _ = GpuModel.objects.get_or_create(
        name="NVIDIA L4", defaults={"memory_mib": 23034, "tdp_w": 72}
    )
    carol = s.owner("Carol Unrelated")
    accounts.partner_grant_create(
        owner=world.b.owner, partner=world.partner, scopes=ALL_SCOPES, by=bob
    )
    made = []
    for i in range(16):
        node = other_node if i % 3 == 0 else lon.node
        gpu = s.gpu(lon, f"SN-{(i * 7) % 16:02d}", slot=i, node=node)
        made.append(gpu)
        if i % 4 == 1:
            Gpu.objects.filter(pk=gpu.pk).update(model=small)
        if i % 5 == 2:
            Gpu.objects.filter(pk=gpu.pk).update(lifecycle_state=LifecycleState.MAINTENANCE)
        if i % 6 == 3:  # no longer placed anywhere
            Placement.objects.filter(gpu=gpu).update(valid_to=NOW - DAY)
        if i % 7 == 4:  # moved: the placement now is the second one
            Placement.objects.filter(gpu=gpu).update(valid_to=NOW - 2 * DAY)
            Placement.objects.create(gpu=gpu, node=other_node, slot=100 + i, valid_from=NOW - DAY)
        if i % 8 == 5:  # moves tomorrow: the placement now is still the first one
            Placement.objects.filter(gpu=gpu).update(valid_to=NOW + DAY)
            Placement.objects.create(gpu=gpu, node=other_node, slot=200 + i, valid_from=NOW + DAY)
        holding = i % 5
        if holding == 0:
            s.own(gpu, world.a.owner, 10_000, s.EPOCH)
        elif holding == 1:
            s.own(gpu, world.a.owner, 5_000, s.EPOCH)
            s.own(gpu, world.b.owner, 5_000, s.EPOCH)
        elif holding == 2:  # A sold it to B three days ago
            s.own(gpu, world.a.owner, 10_000, s.EPOCH, NOW - 3 * DAY)
            s.own(gpu, world.b.owner, 10_000, NOW - 3 * DAY)
        elif holding == 3:  # A held it, now Carol
            s.own(gpu, world.a.owner, 10_000, s.EPOCH, NOW - 3 * DAY)
            s.own(gpu, carol, 10_000, NOW - 3 * DAY)
        else:  # only ever Carol's: never listed
            s.own(gpu, carol, 10_000, s.EPOCH)
        if i % 2 == 0:
            GpuStateTransition.objects.create(gpu=gpu, state="down", at=NOW - 2 * DAY)
            GpuStateTransition.objects.create(gpu=gpu, state="up", at=NOW - DAY + dt.timedelta(i))
        if i % 3 == 1:
            GpuStateTransition.objects.create(gpu=gpu, state="down", at=NOW + DAY)
        if i % 4 == 0:  # reporting up to a minute ago: its state now stands
            s.windows(gpu, NOW - 2 * DAY, NOW - dt.timedelta(minutes=1), node=node)
        elif i % 4 == 2:  # its telemetry ended an hour ago: no_data now, whatever it said
            s.windows(gpu, NOW - 2 * DAY, NOW - dt.timedelta(hours=1), node=node, state="down")
        # Runs of four GPUs made in the same microsecond.
        Gpu.objects.filter(pk=gpu.pk).update(created_at=NOW - 10 * DAY + (i // 4) * DAY)
    return made, carol


def _view(world, params: dict[str, str]) -> GpuList:
    token = world.keys["partner_granted_a"]
    request = APIRequestFactory().get("/api/v1/gpus", params, HTTP_AUTHORIZATION=f"Bearer {token}")
    view = GpuList()
    view.setup(request)
    view.request = view.initialize_request(request)
    view.format_kwarg = None
    caller: Any = view.request.user
    assert isinstance(caller, access.Caller)  # authenticated as the API does
    return view


def _reference(view: GpuList, ordering: str) -> list[dict[str, Any]]:
    """The queryset's rows, ordered by the field then the id (the SQL's tie-break)."""
    queryset = view.get_queryset().prefetch_related(None)
    tie = "-id" if ordering.startswith("-") else "id"
    return list(queryset.order_by(ordering, tie).values(*GPU_ROW_COLUMNS))


ORDERINGS = ("serial", "-serial", "created_at", "-created_at")
FILTERS = [
    {},
    {"held": "now"},
    {"lifecycle_state": "maintenance"},
    {"lifecycle_state": "in_service", "held": "now"},
    {"cluster": "a"},
    {"cluster": "b", "held": "now"},
    {"model": "NVIDIA L4"},
    {"owner": "A"},
    {"owner": "B"},
    {"owner": "B", "held": "now"},
    {"owner": "A", "held": "now", "cluster": "b"},
    {"owner": "CAROL"},
]


@pytest.mark.parametrize(
    "filters", FILTERS, ids=lambda f: "&".join(f"{k}={v}" for k, v in f.items())
)
def test_the_sql_rows_are_the_querysets_rows(world, fleet, filters):
    _, carol = fleet
    owners = {"A": world.a.owner.pk, "B": world.b.owner.pk, "CAROL": carol.pk}
    params = {k: str(owners[v]) if k == "owner" else v for k, v in filters.items()}
    checked = 0
    for ordering in ORDERINGS:
        view = _view(world, params)
        expected = _reference(view, ordering)
        rows = view.rows(dt.datetime.now(dt.UTC)).order_by(ordering)
        assert rows[0:100] == expected
        assert rows[2:5] == expected[2:5]
        checked += len(expected)
    if not filters:  # every kind of state now is compared
        states = {(row["telemetry_state"], row["telemetry_last_seen_at"]) for row in expected}
        assert {
            ("up", NOW - dt.timedelta(minutes=1)),
            ("down", NOW - dt.timedelta(minutes=1)),
            ("no_data", NOW - dt.timedelta(hours=1)),
            (None, None),
        } <= states
    if filters.get("owner") == "CAROL":
        assert checked == 0  # an owner the key may not read lists nothing
    else:
        assert checked > 0


def _walk(client, url: str) -> tuple[list[str], list[list[str]]]:
    """Every page's ids following ``next``, then the pages again following ``previous``."""
    forward: list[list[str]] = []
    while url:
        body = client.get(url).json()
        forward.append([g["id"] for g in body["results"]])
        last, url = url, body["next"]
    backward: list[list[str]] = []
    url = client.get(last).json()["previous"]
    while url:
        body = client.get(url).json()
        backward.insert(0, [g["id"] for g in body["results"]])
        url = body["previous"]
    return [i for page in forward for i in page], [*backward, forward[-1]] if backward else []


@pytest.mark.parametrize(
    ("ordering", "held"),
    list(product(("serial", "-serial", "created_at", "-created_at"), ("ever", "now"))),
)
def test_cursor_pages_walk_every_gpu_once_both_ways(world, fleet, ordering, held):
    """Pages of three cut through the runs of equal ``created_at``: no GPU is skipped or
    repeated, going forwards or back."""
    client = client_for(world.keys["partner_granted_a"])
    every, back = _walk(client, f"/api/v1/gpus?limit=3&ordering={ordering}&held={held}")
    view = _view(world, {"held": held})
    expected = [str(row["id"]) for row in _reference(view, ordering)]
    assert every == expected
    assert len(expected) > 6
    if back:
        assert [i for page in back for i in page] == expected


def test_a_bad_ordering_is_a_clear_error(world, fleet):
    client = client_for(world.keys["partner_granted_a"])
    response = client.get("/api/v1/gpus?ordering=nvml_uuid")
    # A field the list does not order by is refused by name, before the rows are asked.
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "ordering": [
            "Cannot order by nvml_uuid; order by one of serial, -serial, created_at, -created_at."
        ]
    }
    with pytest.raises(ValueError, match="order by"):
        access.GpuRows(params={}).order_by("nvml_uuid")
    assert ApiScope.FLEET_READ in ALL_SCOPES

"""The operator console: ingest health and the telemetry changelists."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from telemetry.models import BootstrapToken
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, fleet_node, uuid7, window
from tests.accounts.two_factor import console_login
from tests.telemetry.conftest import NOW, undecodable_batch_stored

pytestmark = pytest.mark.usefixtures("now")


@pytest.fixture
def console(client, oscar):
    """oscar in the operator console, logged in the real way: password and a TOTP code."""
    return console_login(client, oscar)


def test_ingest_health_shows_queue_nodes_and_rejections(console, node, post):
    start = NOW.replace(second=0) - dt.timedelta(minutes=3)
    post(
        node,
        batch_document(
            node=node,
            windows=[window(node.gpus[0].nvml_uuid, start), window("GPU-stranger", start)],
        ),
    )
    batches_process(worker="w")
    post(node, batch_document(node=node, windows=[]))  # one left pending
    response = console.get(reverse("admin:telemetry_ingest_health"))
    assert response.status_code == 200
    health = response.context["health"]
    assert (health.pending, health.in_flight, health.failed, health.lag_s) == (1, 0, 0, 0.0)
    assert (health.workers, health.abandoned_claims) == ([], 0)
    assert health.rejections_by_reason == [("not_placed", 1)]
    assert [s.node_id for s in health.nodes] == [node.id]
    assert b"GPU-stranger" in response.content


def test_stale_nodes_are_counted_all_and_listed_up_to_the_limit(console, db):
    """A mass outage must read as its real size, not as the length of the list shown."""
    from telemetry.models import NodeStatus
    from telemetry.selectors import ingest_health

    for minutes in range(3):
        NodeStatus.objects.create(
            node=fleet_node(gpus=0).node,
            last_seen_at=NOW - dt.timedelta(minutes=10 + minutes),
            stale=True,
            stale_since=NOW - dt.timedelta(minutes=7 + minutes),
        )
    NodeStatus.objects.create(node=fleet_node(gpus=0).node, last_seen_at=NOW)  # fresh
    health = ingest_health(now=NOW, nodes=2)
    assert health.stale_count == 3
    assert [s.stale_since for s in health.stale_nodes] == [
        NOW - dt.timedelta(minutes=7),
        NOW - dt.timedelta(minutes=8),
    ]
    page = console.get(reverse("admin:telemetry_ingest_health")).content.decode()
    assert "Stale nodes (3)" in page


@pytest.mark.parametrize(
    "model",
    [
        "ingestbatch",
        "rejectedrecord",
        "telemetryevent",
        "gpustatetransition",
        "hourlyrollup",
        "nodestatus",
        "nodecredential",
        "bootstraptoken",
    ],
)
def test_changelists_load_without_counting(console, node, model, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):
        assert console.get(reverse(f"admin:telemetry_{model}_changelist")).status_code == 200


def test_a_bootstrap_token_is_issued_from_the_console_and_shown_once(console, node):
    response = console.post(
        reverse("admin:telemetry_bootstraptoken_add"), {"node": node.id}, follow=True
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert any(node.node.hostname in m and "shown once" in m for m in shown)
    assert BootstrapToken.objects.filter(node=node.node).count() == 1


@pytest.mark.parametrize("model", ["nodestatus", "ingestbatch"])
def test_ingest_health_is_linked_from_the_telemetry_changelists(console, model):
    page = console.get(reverse(f"admin:telemetry_{model}_changelist")).content.decode()
    assert f'<a href="{reverse("admin:telemetry_ingest_health")}">Ingest health</a>' in page


def test_the_batch_list_filters_by_status_through_the_queue(console, node, post):
    """Pending and failed batches are found by their queue rows; processed ones by status."""
    from telemetry.models import IngestBatch

    post(node, batch_document(node=node, windows=[]))
    batches_process(worker="w")
    post(node, batch_document(node=node, windows=[]))  # left pending
    undecodable_batch_stored(node)
    batches_process(worker="w")  # the pending one is processed, the broken one set aside
    post(node, batch_document(node=node, windows=[]))  # left pending
    by_status = {
        status: IngestBatch.objects.filter(status=status).values_list("pk", flat=True)
        for status in ("pending", "processed", "failed")
    }
    assert [len(pks) for pks in by_status.values()] == [1, 2, 1]
    url = reverse("admin:telemetry_ingestbatch_changelist")
    for status, pks in by_status.items():
        shown = console.get(url, {"status": status}).context["cl"].result_list
        assert sorted(b.pk for b in shown) == sorted(pks), status
    assert len(console.get(url).context["cl"].result_list) == 4


def _v2_windows(node, start):
    """Node's GPU 0 over four minutes: two whole from the buffer, one half observed with a
    gap in the buffer, one down (no utilization) observed for 30 s; GPU 1 one minute read
    instantaneously (its buffer unsupported)."""
    g0, g1 = (g.nvml_uuid for g in node.gpus)
    minute = dt.timedelta(minutes=1)

    def v2(gpu, at, span, method, **overrides):
        return window(gpu, at, observed_from=span[0], observed_to=span[1], util_method=method,
                      **overrides)  # fmt: skip

    return [
        v2(g0, start, (0, 60), "buffer"),
        v2(g0, start + minute, (0, 60), "buffer"),
        v2(g0, start + 2 * minute, (0, 30), "mixed"),
        v2(g0, start + 3 * minute, (30, 60), None, state="down", util_gpu=None, util_mem=None),
        v2(g1, start, (0, 60), "instant"),
    ]


def test_ingest_health_shows_each_node_s_utilization_methods_and_observed_coverage(
    console, node, post
):
    start = NOW.replace(second=0) - dt.timedelta(minutes=10)
    long_ago = start - dt.timedelta(hours=2)  # outside the last hour: not counted
    document = batch_document(node=node, windows=[
        *_v2_windows(node, start),
        window(node.gpus[1].nvml_uuid, long_ago, observed_from=0, observed_to=1,
               util_method="instant"),
    ])  # fmt: skip
    assert post(node, {**document, "schema": 2}).status_code == 202
    quiet = fleet_node(gpus=1, placed_from=NOW - dt.timedelta(days=1))
    post(quiet, batch_document(node=quiet, windows=[]))  # seen, but no windows
    batches_process(worker="w")
    response = console.get(reverse("admin:telemetry_ingest_health"))
    rows = {status.node_id: coverage for status, coverage in response.context["node_rows"]}
    assert rows[quiet.id] is None
    mine = rows[node.id]
    assert (mine.windows, mine.observed_s) == (5, 240)
    assert mine.shares == [("buffer", 40.0), ("mixed", 20.0), ("instant", 20.0), ("none", 20.0)]
    assert mine.coverage == 80.0
    page = response.content.decode()
    assert "buffer 40.0 % · mixed 20.0 % · instant 20.0 % · none 20.0 %" in page
    assert "<td>80.0 %</td>" in page
    assert reverse("admin:telemetry_node_windows", args=[node.id]) in page


def test_a_node_s_windows_show_their_observed_span_and_method(console, node, post):
    start = NOW.replace(second=0) - dt.timedelta(minutes=10)
    document = batch_document(node=node, windows=_v2_windows(node, start))
    assert post(node, {**document, "schema": 2}).status_code == 202
    v1_minute = start - dt.timedelta(minutes=30)
    old = batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, v1_minute)])
    assert post(node, old).status_code == 202
    batches_process(worker="w")
    url = reverse("admin:telemetry_node_windows", args=[node.id])
    response = console.get(url)
    assert response.status_code == 200
    shown = [
        (w.window_start, w.gpu.serial, w.observed_from, w.observed_to, w.util_method)
        for w in response.context["windows"]
    ]
    s0, s1 = (g.serial for g in node.gpus)
    minute = dt.timedelta(minutes=1)
    assert shown == [
        (start + 3 * minute, s0, 30, 60, None),
        (start + 2 * minute, s0, 0, 30, "mixed"),
        (start + minute, s0, 0, 60, "buffer"),
        (start, s0, 0, 60, "buffer"),
        (start, s1, 0, 60, "instant"),
        (v1_minute, s0, 0, 60, "instant"),
    ]
    page = response.content.decode()
    assert "<td>0–30</td><td>mixed</td>" in page
    assert "<td>30–60</td><td>none</td>" in page
    # The hour before: nothing from this node.
    earlier = console.get(url, {"before": (NOW - dt.timedelta(hours=1)).isoformat()})
    assert list(earlier.context["windows"]) == []
    assert console.get(reverse("admin:telemetry_node_windows", args=[uuid7()])).status_code == 404

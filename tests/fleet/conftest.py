"""Fleet fixtures: one site with a cluster of two nodes, a catalog entry and a few GPUs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet.models import Cluster, Gpu, GpuModel, Node, Site
from fleet.services import inventory, lifecycle


def T(day: int, hour: int = 0, minute: int = 0, second: int = 0, month: int = 3) -> datetime:
    """An instant in 2026 (March unless said), UTC."""
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def h100(db: None) -> GpuModel:
    return GpuModel.objects.create(name="NVIDIA H100 80GB HBM3", memory_mib=81559, tdp_w=700)


@pytest.fixture
def site(db: None) -> Site:
    return Site.objects.create(code="fra1", name="Frankfurt 1", country="DE")


@pytest.fixture
def cluster(site: Site) -> Cluster:
    return Cluster.objects.create(site=site, code="a", name="Cluster A")


@pytest.fixture
def other_cluster(site: Site) -> Cluster:
    return Cluster.objects.create(site=site, code="b", name="Cluster B")


@pytest.fixture
def node(cluster: Cluster) -> Node:
    return Node.objects.create(cluster=cluster, hostname="fra1-a-n01", gpu_slots=8)


@pytest.fixture
def node2(other_cluster: Cluster) -> Node:
    return Node.objects.create(cluster=other_cluster, hostname="fra1-b-n01", gpu_slots=8)


def make_gpu(model: GpuModel, n: int, *, by=None, received: datetime | None = None) -> Gpu:
    return inventory.gpu_register(
        serial=f"SN{n:04d}",
        nvml_uuid=f"GPU-00000000-0000-0000-0000-{n:012d}",
        model=model,
        by=by,
        received_at=received or T(1),
    )


@pytest.fixture
def gpu(h100: GpuModel) -> Gpu:
    return make_gpu(h100, 1)


@pytest.fixture
def gpu2(h100: GpuModel) -> Gpu:
    return make_gpu(h100, 2)


@pytest.fixture
def in_service_gpu(gpu: Gpu) -> Gpu:
    lifecycle.gpus_transition(gpus=[gpu], state="burn_in", at=T(2), by=None)
    lifecycle.gpus_transition(gpus=[gpu], state="in_service", at=T(3), by=None)
    return gpu

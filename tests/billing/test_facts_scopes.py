"""Maintenance and incidents reach a GPU through their scope: the GPU itself, or the node,
cluster or site where it was placed at the time. The facts read only the events whose scope
can reach the GPUs asked for; these check that none is lost or added on the way, for every
kind of scope, across a move between sites, with figures written out by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from billing.engine.intervals import Interval
from billing.selectors.facts import gpu_facts
from fleet.models import Cluster, Incident, IncidentCause, MaintenanceWindow, Node
from fleet.services.placement import gpu_move
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db

UTC = dt.UTC
START = dt.datetime(2026, 3, 1, tzinfo=UTC)
END = dt.datetime(2026, 3, 3, tzinfo=UTC)


def at(hour: int) -> dt.datetime:
    return START + dt.timedelta(hours=hour)


def _maintenance(title: str, a: int, b: int, **scope: object) -> MaintenanceWindow:
    return MaintenanceWindow.objects.create(
        title=title, announced_at=at(0) - dt.timedelta(days=3), starts_at=at(a), ends_at=at(b),
        **scope,
    )  # fmt: skip


def _incident(title: str, cause: str, a: int, b: int | None, **scope: object) -> Incident:
    return Incident.objects.create(
        title=title, cause=cause, started_at=at(a), ended_at=None if b is None else at(b),
        **scope,
    )  # fmt: skip


def test_every_scope_reaches_the_gpus_placed_in_it_while_they_were_there():
    fra, ams = s.fleet("fra1"), s.fleet("ams1")
    fra_b = Cluster.objects.create(site=fra.site, code="b", name="B")
    fra_b_node = Node.objects.create(cluster=fra_b, hostname="fra1-b-n01")
    # a: in fra1/a until hour 30, then in ams1/a. b: in fra1/b throughout. c: in ams1/a.
    a = s.gpu(fra, "SN-A", slot=0)
    b = s.gpu(fra, "SN-B", slot=0, node=fra_b_node)
    c = s.gpu(ams, "SN-C", slot=1)
    gpu_move(gpu=a, node=ams.node, slot=0, at=at(30), by=None, reason="t")

    _maintenance("site fra", 2, 4, site=fra.site)  # a and b
    _maintenance("cluster fra/a", 5, 6, cluster=fra.cluster)  # a only
    _maintenance("cluster fra/b", 7, 8, cluster=fra_b)  # b only
    _maintenance("node ams", 28, 33, node=ams.node)  # c; a from hour 30
    _maintenance("gpu c", 9, 10, gpu=c)
    _maintenance("site ams, cancelled", 1, 40, site=ams.site).delete()
    _incident("site ams", IncidentCause.POWER, 20, None, site=ams.site)  # a from 30, c
    _incident("asked", IncidentCause.OWNER_REQUESTED, 11, 12, gpu=a)
    _incident("cluster fra/a", IncidentCause.NETWORK, 29, 31, cluster=fra.cluster)  # a to 30

    facts = {f.serial: f for f in gpu_facts(gpu_ids=[a.pk, b.pk, c.pk], start=START, end=END)}
    fa, fb, fc = facts["SN-A"], facts["SN-B"], facts["SN-C"]

    assert fa.maintenance == [
        Interval(at(2), at(4)),
        Interval(at(5), at(6)),
        Interval(at(30), at(33)),
    ]
    assert fb.maintenance == [Interval(at(2), at(4)), Interval(at(7), at(8))]
    assert fc.maintenance == [Interval(at(9), at(10)), Interval(at(28), at(33))]
    assert fa.incidents == [Interval(at(11), at(12)), Interval(at(29), END)]
    assert fa.operator_incidents == [Interval(at(29), END)]
    assert fb.incidents == [] and fb.operator_incidents == []
    assert fc.incidents == [Interval(at(20), END)] == fc.operator_incidents
    assert [e[2] for e in fa.events] == [
        "site fra", "cluster fra/a", "node ams", "asked", "site ams", "cluster fra/a",
    ]  # fmt: skip
    assert [e[2] for e in fb.events] == ["site fra", "cluster fra/b"]
    assert [e[2] for e in fc.events] == ["gpu c", "node ams", "site ams"]

    # Asked alone, each GPU gets the same facts: nothing depends on which others were asked.
    for gpu, fact in ((a, fa), (b, fb), (c, fc)):
        (alone,) = gpu_facts(gpu_ids=[gpu.pk], start=START, end=END)
        assert alone == fact

"""Notification emails: found by scanning forward from cursors, each notice sent once."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.core import mail

from fleet.models import Cluster, Node
from fleet.services import operations
from portal.models import Notice, NoticeKind, NotificationPreference, OutageWatch
from portal.services.notifications import notices_send, notifications_scan
from portal.wording import forbidden_wording
from telemetry.models import GpuStateTransition
from tests.portal.world import NOW

pytestmark = pytest.mark.django_db


def scan() -> None:
    notifications_scan(now=dt.datetime.now(dt.UTC))


def sent() -> list[tuple[str, str]]:
    return sorted((m.to[0], str(m.subject)) for m in mail.outbox)


@pytest.fixture
def started(world):
    """The first scan only places the cursors: history before it is not announced."""
    scan()
    assert Notice.objects.count() == 0
    return world


def test_an_incident_is_told_once_when_opened_and_once_when_resolved(
    started, oscar, alice, bob, now
):
    incident = operations.incident_open(
        scope=Node.objects.get(hostname="fra1-a-n01"),
        title="Power loss on fra1-a-n01",
        cause="power",
        started_at=NOW - dt.timedelta(minutes=5),
        by=oscar,
        notes_for_owners="Feed B tripped.",
        internal_notes="SECRET",
    )
    scan()
    scan()
    assert notices_send(now=NOW) == 2
    assert notices_send(now=NOW) == 0
    assert sent() == [
        ("alice@owner.example", "[Steward] Incident opened: Power loss on fra1-a-n01"),
        ("bob@owner.example", "[Steward] Incident opened: Power loss on fra1-a-n01"),
    ]
    body = mail.outbox[0].body
    assert "Feed B tripped." in body and "SECRET" not in body
    assert f"http://localhost:8000/incidents/{incident.pk}/" in body
    mail.outbox.clear()
    operations.incident_close(incident=incident, ended_at=NOW, by=oscar)
    scan()
    notices_send(now=NOW)
    assert [s for _, s in sent()] == ["[Steward] Incident resolved: Power loss on fra1-a-n01"] * 2


def test_preferences_decide_who_is_told(started, oscar, alice, bob, now):
    NotificationPreference.objects.create(user=alice, maintenance=False)
    operations.maintenance_schedule(
        scope=Cluster.objects.get(code="a"),
        title="Cooling loop service",
        announced_at=NOW,
        starts_at=NOW + dt.timedelta(days=3),
        ends_at=NOW + dt.timedelta(days=3, hours=2),
        by=oscar,
    )
    scan()
    notices_send(now=NOW)
    # Only bob: alice turned maintenance emails off. (X is bob's now; A1, A2 alice's.)
    assert sent() == [
        ("bob@owner.example", "[Steward] Maintenance announced: Cooling loop service")
    ]


def test_maintenance_announced_later_waits_until_then(started, oscar, bob, now):
    operations.maintenance_schedule(
        scope=Cluster.objects.get(code="b"),
        title="Rack move",
        announced_at=NOW + dt.timedelta(hours=1),
        starts_at=NOW + dt.timedelta(days=2),
        ends_at=NOW + dt.timedelta(days=2, hours=1),
        by=oscar,
    )
    scan()
    assert notices_send(now=NOW) == 0
    assert notices_send(now=NOW + dt.timedelta(hours=1)) == 1
    assert sent() == [("bob@owner.example", "[Steward] Maintenance announced: Rack move")]


def test_a_gpu_down_longer_than_the_threshold_is_told_once(started, alice, now):
    NotificationPreference.objects.create(user=alice, gpu_down_after_minutes=30)
    GpuStateTransition.objects.create(
        gpu=started.a1, state="down", at=NOW - dt.timedelta(minutes=10)
    )
    scan()
    assert OutageWatch.objects.count() == 1
    assert Notice.objects.count() == 0  # 10 minutes: not yet
    now.shift(dt.timedelta(minutes=20))
    scan()
    scan()
    notice = Notice.objects.get()
    assert (notice.user, notice.kind) == (alice, NoticeKind.GPU_DOWN)
    assert notice.subject == "GPU A1 down since 2026-11-21 11:50 UTC"
    # It comes back: the watch ends; a later outage is a new notice.
    GpuStateTransition.objects.create(gpu=started.a1, state="up", at=NOW + dt.timedelta(minutes=25))
    scan()
    assert OutageWatch.objects.count() == 0
    assert Notice.objects.count() == 1


def test_silence_is_told_as_silence_with_each_users_threshold(
    started, alice, bob, alice_owner, now
):
    from accounts import services as accounts

    colleague = accounts.user_create(email="cole@owner.example", password="p" * 14)
    accounts.membership_grant(user=colleague, owner=alice_owner, role="viewer")
    NotificationPreference.objects.create(user=alice, gpu_down_after_minutes=5)
    NotificationPreference.objects.create(user=colleague, gpu_down_after_minutes=60)
    GpuStateTransition.objects.create(
        gpu=started.a1, state="no_data", at=NOW - dt.timedelta(minutes=6)
    )
    scan()
    assert [(n.user, n.kind) for n in Notice.objects.all()] == [(alice, NoticeKind.GPU_SILENT)]
    notices_send(now=dt.datetime.now(dt.UTC))
    assert "no data" in mail.outbox[0].body and "not as down" in mail.outbox[0].body
    now.shift(dt.timedelta(minutes=55))
    scan()
    assert sorted(n.user.email for n in Notice.objects.all()) == [
        "alice@owner.example",
        "cole@owner.example",
    ]


def test_no_gpu_notice_during_planned_maintenance_or_when_turned_off(started, oscar, alice, now):
    operations.maintenance_schedule(
        scope=started.a1,
        title="Reseat A1",
        announced_at=NOW - dt.timedelta(hours=1),
        starts_at=NOW - dt.timedelta(hours=1),
        ends_at=NOW + dt.timedelta(hours=1),
        by=oscar,
    )
    NotificationPreference.objects.create(user=alice, gpu_down_after_minutes=5, maintenance=False)
    GpuStateTransition.objects.create(
        gpu=started.a1, state="down", at=NOW - dt.timedelta(minutes=30)
    )
    scan()
    assert not Notice.objects.filter(kind=NoticeKind.GPU_DOWN).exists()
    NotificationPreference.objects.filter(user=alice).update(gpu_down=False)
    now.shift(dt.timedelta(hours=2))
    scan()
    assert not Notice.objects.filter(kind=NoticeKind.GPU_DOWN).exists()


def test_the_outage_scan_reads_only_new_transitions_and_watched_gpus(
    started, django_assert_max_num_queries, now
):
    GpuStateTransition.objects.bulk_create(
        [
            GpuStateTransition(gpu=started.a2, state="up", at=NOW - dt.timedelta(minutes=n))
            for n in range(1, 200)
        ]
    )
    with django_assert_max_num_queries(14):
        scan()
    assert OutageWatch.objects.count() == 0


def test_every_notice_body_keeps_the_wording_rule(started, oscar, alice, now):
    NotificationPreference.objects.create(user=alice, gpu_down_after_minutes=5)
    incident = operations.incident_open(
        scope=started.a1, title="Check", cause="hardware", started_at=NOW, by=oscar
    )
    operations.incident_close(incident=incident, ended_at=NOW + dt.timedelta(seconds=1), by=oscar)
    operations.maintenance_schedule(
        scope=started.a1,
        title="Swap",
        announced_at=NOW,
        starts_at=NOW + dt.timedelta(days=1),
        ends_at=NOW + dt.timedelta(days=1, hours=1),
        by=oscar,
    )
    GpuStateTransition.objects.create(gpu=started.a2, state="down", at=NOW - dt.timedelta(hours=1))
    GpuStateTransition.objects.create(
        gpu=started.a1, state="no_data", at=NOW - dt.timedelta(hours=1)
    )
    scan()
    kinds = set(Notice.objects.values_list("kind", flat=True))
    assert kinds == {
        "incident_opened",
        "incident_resolved",
        "maintenance_announced",
        "gpu_down",
        "gpu_silent",
    }
    for notice in Notice.objects.all():
        assert forbidden_wording(notice.subject + "\n" + notice.body, markup=False) == []


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_beat_task_scans_and_a_real_worker_sends(
    celery_worker, oscar, alice_owner, bob_owner, alice, bob
):
    from portal.tasks import notifications_scan as scan_task
    from tests.portal.world import build

    world = build(oscar=oscar, alice_owner=alice_owner, bob_owner=bob_owner)
    scan_task.apply_async(queue=celery_worker.queue, ignore_result=False).get(timeout=30)
    operations.incident_open(
        scope=world.b1, title="Worker test", cause="power", started_at=NOW, by=oscar
    )
    scan_task.apply_async(queue=celery_worker.queue, ignore_result=False).get(timeout=30)
    deadline = time.monotonic() + 30
    while not Notice.objects.filter(sent_at__isnull=False).exists():
        assert time.monotonic() < deadline, "the worker never sent the notice"
        time.sleep(0.2)
    notice = Notice.objects.get()
    assert (notice.user, notice.kind, notice.subject) == (
        bob,
        NoticeKind.INCIDENT_OPENED,
        "Incident opened: Worker test",
    )

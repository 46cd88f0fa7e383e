"""Notices in the portal: written by the notification scan beside each email, whatever the
user's email choices; listed to their user only, while a member of the account; marked read."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.core import mail

from accounts import services as accounts
from accounts.models import Membership
from fleet.models import Cluster, Node
from fleet.services import operations
from portal.access import notices_for_user
from portal.models import Notice, NoticeKind, NotificationPreference, PortalNotice
from portal.services.notifications import notices_send, notifications_scan
from telemetry.models import GpuStateTransition
from tests.billing import reports_world as rw
from tests.conftest import PASSWORD
from tests.portal.world import NOW

pytestmark = pytest.mark.django_db


def scan() -> None:
    notifications_scan(now=dt.datetime.now(dt.UTC))


def listed(user) -> list[tuple[str, str, str]]:
    return [
        (n.kind, n.title, n.link)
        for n in notices_for_user(user=user, now=dt.datetime.now(dt.UTC)).order_by("pk")
    ]


@pytest.fixture
def started(world):
    scan()  # places the cursors
    assert PortalNotice.objects.count() == 0
    return world


def _incident(oscar):
    return operations.incident_open(
        scope=Node.objects.get(hostname="fra1-a-n01"),
        title="Power loss on fra1-a-n01",
        cause="power",
        started_at=NOW - dt.timedelta(minutes=5),
        by=oscar,
        notes_for_owners="Feed B tripped.",
    )


def test_an_incident_is_listed_for_each_user_concerned_once_even_without_email(
    started, oscar, alice, bob, alice_owner, bob_owner, now
):
    NotificationPreference.objects.create(user=alice, incidents=False)
    incident = _incident(oscar)
    scan()
    scan()
    # alice turned incident emails off: bob alone is emailed, both see it in the portal.
    assert notices_send(now=NOW) == 1
    assert [m.to for m in mail.outbox] == [["bob@owner.example"]]
    expected = [
        (
            "incident_opened",
            "Incident opened: Power loss on fra1-a-n01",
            f"/incidents/{incident.pk}/",
        )
    ]
    assert listed(alice) == expected
    assert listed(bob) == expected
    assert set(PortalNotice.objects.values_list("user_id", "owner_id")) == {
        (alice.pk, alice_owner.pk),
        (bob.pk, bob_owner.pk),
    }
    # The email and the portal notice are the same event, keyed alike.
    assert Notice.objects.get().key == PortalNotice.objects.get(user=bob).key
    operations.incident_close(incident=incident, ended_at=NOW, by=oscar)
    scan()
    assert [k for k, _, _ in listed(alice)] == ["incident_opened", "incident_resolved"]


def test_maintenance_is_listed_from_its_announcement(started, oscar, bob, now):
    operations.maintenance_schedule(
        scope=Cluster.objects.get(code="b"),
        title="Rack move",
        announced_at=NOW + dt.timedelta(hours=1),
        starts_at=NOW + dt.timedelta(days=2),
        ends_at=NOW + dt.timedelta(days=2, hours=1),
        by=oscar,
    )
    scan()
    assert PortalNotice.objects.count() == 1
    assert listed(bob) == []
    now.shift(dt.timedelta(hours=1))
    assert [t for _, t, _ in listed(bob)] == ["Maintenance announced: Rack move"]


def test_a_gpu_down_is_listed_after_the_threshold_with_the_email_turned_off(started, alice, now):
    NotificationPreference.objects.create(user=alice, gpu_down=False, gpu_down_after_minutes=15)
    GpuStateTransition.objects.create(
        gpu=started.a1, state="down", at=NOW - dt.timedelta(minutes=10)
    )
    scan()
    assert listed(alice) == []  # 10 minutes: not yet
    now.shift(dt.timedelta(minutes=6))
    scan()
    assert listed(alice) == [
        ("gpu_down", "GPU A1 down since 2026-11-21 11:50 UTC", f"/gpus/{started.a1.pk}/")
    ]
    assert Notice.objects.count() == 0  # no email: she turned them off


def test_the_page_lists_only_the_users_own_notices_and_marks_them_read(
    client, started, oscar, alice, bob, now
):
    _incident(oscar)
    operations.maintenance_schedule(
        scope=Cluster.objects.get(code="a"),
        title="Cooling loop service",
        announced_at=NOW,
        starts_at=NOW + dt.timedelta(days=3),
        ends_at=NOW + dt.timedelta(days=3, hours=2),
        by=oscar,
    )
    scan()
    client.force_login(alice)
    page = client.get("/notices/").content.decode()
    assert re.search(r'Notices <span class="count">2<span class="visually-hidden"> unread', page)
    assert "Incident opened: Power loss on fra1-a-n01" in page
    assert "Maintenance announced: Cooling loop service" in page
    assert page.count("Mark as read<") == 2

    # Another user's notice id answers 404 and changes nothing.
    bobs = PortalNotice.objects.get(user=bob, kind=NoticeKind.INCIDENT_OPENED)
    assert client.post("/notices/", {"notice": bobs.pk}).status_code == 404
    assert client.post("/notices/", {"notice": "x"}).status_code == 404
    bobs.refresh_from_db()
    assert bobs.read_at is None

    mine = PortalNotice.objects.get(user=alice, kind=NoticeKind.INCIDENT_OPENED)
    response = client.post("/notices/", {"notice": mine.pk, "page": "1"})
    assert (response.status_code, response["Location"]) == (302, "/notices/?page=1")
    mine.refresh_from_db()
    assert mine.read_at == NOW
    page = client.get("/").content.decode()  # the count is in every page's header
    assert re.search(r'Notices <span class="count">1<span class="visually-hidden"> unread', page)
    client.post("/notices/", {"all": "1"})
    assert not PortalNotice.objects.filter(user=alice, read_at__isnull=True).exists()
    assert PortalNotice.objects.filter(user=bob, read_at__isnull=True).count() == 2
    page = client.get("/notices/").content.decode()
    assert 'class="count"' not in page and "Mark as read<" not in page


def test_a_former_member_no_longer_sees_the_accounts_notices(client, started, oscar, alice):
    _incident(oscar)
    scan()
    assert len(listed(alice)) == 1
    Membership.objects.filter(user=alice).delete()
    assert listed(alice) == []
    client.force_login(alice)
    notice = PortalNotice.objects.get(user=alice)
    assert client.post("/notices/", {"notice": notice.pk}).status_code == 404


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get("/notices/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_published_statement_is_listed_for_every_member_even_one_without_emails(
    started, oscar, alice_owner, alice, now
):
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    carl = accounts.user_create(email="carl@owner.example", password=PASSWORD, full_name="Carl")
    accounts.membership_grant(user=carl, owner=alice_owner, role=Membership.Role.VIEWER)
    NotificationPreference.objects.create(user=carl, statement_published=False)
    scan()  # carl's membership is new; the statements cursor is placed already
    with time_machine.travel(rw.END + dt.timedelta(days=1), tick=False):
        statement = rw.statement_build(
            owner=alice_owner,
            gpu=started.a1,
            disclosure=accounts.disclosure_standard_ensure(),
            publish_by=(oscar, olga),
        )
    scan()
    scan()
    expected = [
        (
            "statement_published",
            "Statement published: 2026-02-01 00:00 to 2026-02-04 00:00, EUR",
            f"/statements/{statement.pk}/",
        )
    ]
    assert listed(alice) == expected
    assert listed(carl) == expected
    assert list(Notice.objects.values_list("user_id", flat=True)) == [alice.pk]  # emails

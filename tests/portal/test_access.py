"""Who sees what: every page through the one access helper; another owner's ids answer 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts import services as accounts
from accounts.models import Membership
from portal import access
from portal.models import UserSession
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LISTS = ["/", "/gpus/", "/incidents/", "/maintenance/"]
SETTINGS = ["/settings/notifications/", "/settings/security/", "/settings/security/2fa/enrol/"]


def gpu_url(gpu):
    return reverse("portal:gpu", args=[gpu.pk])


def test_anonymous_is_sent_to_log_in_from_every_page(client, world):
    urls = [
        *LISTS,
        *SETTINGS,
        gpu_url(world.a1),
        reverse("portal:incident", args=[world.gpu_incident.pk]),
        reverse("portal:maintenance-window", args=[world.maintenance.pk]),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response.headers["Location"] == f"/login/?next={url}", url
    for url in [
        "/logout/",
        "/settings/security/2fa/disable/",
        "/settings/security/2fa/recovery-codes/",
        "/settings/security/sessions/revoke-others/",
        "/settings/security/sessions/1/revoke/",
    ]:
        assert client.post(url).status_code == 302, url


def test_helper_resolves_own_and_formerly_owned_gpus_and_404s_the_rest(world, alice, bob):
    assert access.gpu_for_user(user=alice, gpu_id=world.a1.pk) == world.a1
    assert access.gpu_for_user(user=alice, gpu_id=world.x.pk) == world.x  # sold on Nov 10
    assert access.gpu_for_user(user=bob, gpu_id=world.x.pk) == world.x
    from django.http import Http404

    for user, gpu in [(alice, world.b1), (bob, world.a1), (bob, world.a2)]:
        with pytest.raises(Http404):
            access.gpu_for_user(user=user, gpu_id=gpu.pk)
    assert sorted(g.serial for g in access.gpus_for_user(user=alice)) == ["A1", "A2", "X"]
    assert sorted(g.serial for g in access.gpus_for_user(user=alice, held_at=world_now())) == [
        "A1",
        "A2",
    ]
    assert sorted(g.serial for g in access.gpus_for_user(user=bob)) == ["B1", "X"]


def world_now():
    from tests.portal.world import NOW

    return NOW


def test_incidents_and_maintenance_follow_the_holdings(world, alice, bob):
    assert list(access.incidents_for_user(user=alice)) == [world.gpu_incident]
    assert list(access.incidents_for_user(user=bob)) == [world.node_incident]
    # Cluster A's maintenance on Nov 12 covered A1 and A2 (alice) and X (bob's since Nov 10).
    assert list(access.maintenance_for_user(user=alice)) == [world.maintenance]
    assert list(access.maintenance_for_user(user=bob)) == [world.maintenance]
    assert [g.serial for g in access.gpus_touched(user=alice, scoped=world.maintenance)] == [
        "A1",
        "A2",
    ]
    assert [g.serial for g in access.gpus_touched(user=bob, scoped=world.maintenance)] == ["X"]
    assert list(access.incidents_for_user(user=bob, gpu=world.x)) == []
    assert access.users_concerned(scoped=world.maintenance) == sorted([alice.pk, bob.pk])
    assert access.users_concerned(scoped=world.node_incident) == [bob.pk]


def test_owner_a_cannot_reach_anything_of_owner_b(client, world, alice, bob):
    client.force_login(alice)
    foreign = [
        gpu_url(world.b1),
        gpu_url(world.b1) + "?export=hours",
        gpu_url(world.b1) + "?export=ownership",
        reverse("portal:incident", args=[world.node_incident.pk]),
    ]
    for url in foreign:
        assert client.get(url).status_code == 404, url
    for url in LISTS:
        page = client.get(url).content.decode()
        assert ">B1<" not in page, url
        assert "Fan failure" not in page, url
    csv = b"".join(client.get("/gpus/?export=gpus&held=ever").streaming_content).decode()
    assert "B1" not in csv and "A1" in csv and "X" in csv
    csv = b"".join(client.get("/incidents/?export=incidents").streaming_content).decode()
    assert "Fan failure" not in csv and "A2 falls off the bus" in csv

    client.force_login(bob)
    for url in [
        gpu_url(world.a1),
        gpu_url(world.a2),
        reverse("portal:incident", args=[world.gpu_incident.pk]),
    ]:
        assert client.get(url).status_code == 404, url
    assert client.get(gpu_url(world.x)).status_code == 200
    assert (
        client.get(reverse("portal:maintenance-window", args=[world.maintenance.pk])).status_code
        == 200
    )


def test_unknown_ids_answer_404(client, world, alice):
    client.force_login(alice)
    assert client.get("/gpus/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert client.get("/incidents/999999/").status_code == 404
    assert client.get("/maintenance/999999/").status_code == 404


def test_a_session_of_another_user_cannot_be_revoked(client, world, alice, bob):
    other = client.__class__()
    other.post("/login/", {"username": bob.email, "password": PASSWORD})
    bobs = UserSession.objects.get(user=bob)
    client.force_login(alice)
    assert client.post(reverse("portal:session-revoke", args=[bobs.pk])).status_code == 404
    assert UserSession.objects.filter(pk=bobs.pk).exists()
    assert other.get("/").status_code == 200


def test_a_user_without_an_owner_account_sees_nothing(client, world, carol):
    client.force_login(carol)
    page = client.get("/").content.decode()
    assert "not linked to any owner account" in page
    assert client.get(gpu_url(world.a1)).status_code == 404
    listing = client.get("/gpus/").content.decode()
    # Look for the GPU itself (its page link, its serial as a cell), not the bare text "A1",
    # which a random CSRF token in the page can contain.
    assert gpu_url(world.a1) not in listing
    assert ">A1<" not in listing


def test_operators_see_no_owner_data_in_the_portal(client, world, oscar):
    """The operator console is their tool; the portal is scoped by membership only."""
    client.force_login(oscar)
    assert client.get(gpu_url(world.a1)).status_code == 404


def test_viewer_and_admin_members_see_the_same_pages(client, world, alice_owner):
    viewer = accounts.user_create(email="vera@owner.example", password=PASSWORD)
    accounts.membership_grant(user=viewer, owner=alice_owner, role=Membership.Role.VIEWER)
    client.force_login(viewer)
    for url in [*LISTS, *SETTINGS, gpu_url(world.a1)]:
        assert client.get(url).status_code == 200, url
    assert client.get(gpu_url(world.b1)).status_code == 404

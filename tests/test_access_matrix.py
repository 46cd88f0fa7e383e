"""One access matrix for both edges (issue 21, item 7): who sees what, through the portal and
through the partner API, is ``access.visibility``'s one rule. Each row below is an object of
the small fleet of ``tests.portal.world`` with its money (``tests.portal.money_world``); each
column an asker. A page or endpoint answers 200 for what the asker may see and 404 (never
403) for the rest, and the lists show exactly the same objects."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from accounts import services as accounts
from accounts.models import ApiScope, Membership, Owner, User
from tests.api.conftest import client_for, key_for
from tests.billing.conftest import olga  # noqa: F401 - a fixture, the second operator
from tests.portal import money_world
from tests.portal import world as world_module

pytestmark = pytest.mark.django_db

FLEET, STATEMENTS = ApiScope.FLEET_READ.value, ApiScope.STATEMENTS_READ.value

# Who sees each object: alice's account (alice in the portal, her personal key, and the
# partner her account granted fleet:read), bob's account (bob, his key). X was alice's until
# Nov 10 and bob's since: both see it, and the maintenance on its cluster on Nov 12 (bob held
# it then; alice held A1 and A2 there). The partner has no statements:read; the member removed
# from alice's account sees nothing.
EXPECTED: dict[str, set[str]] = {
    "gpu a1": {"alice", "alice key", "partner"},
    "gpu a2": {"alice", "alice key", "partner"},
    "gpu x": {"alice", "alice key", "partner", "bob", "bob key"},
    "gpu b1": {"bob", "bob key"},
    "incident on a2": {"alice", "alice key", "partner"},
    "incident on node b": {"bob", "bob key"},
    "maintenance on cluster a": {"alice", "alice key", "partner", "bob", "bob key"},
    "statement alice october": {"alice", "alice key"},
    "statement bob october": {"bob", "bob key"},
}
PORTAL = ("alice", "bob", "removed")
API = ("alice key", "bob key", "partner")


@pytest.fixture
def now() -> Iterator[Any]:
    with time_machine.travel(world_module.NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def matrix(now, oscar, olga, alice_owner, bob_owner, alice, bob, carol, carol_partner):  # noqa: F811
    world = world_module.build(oscar=oscar, alice_owner=alice_owner, bob_owner=bob_owner)
    money = money_world.build(
        world=world, oscar=oscar, olga=olga, alice_owner=alice_owner, bob_owner=bob_owner
    )
    removed = accounts.user_create(email="dave@example.com", password="x" * 16, full_name="Dave")
    accounts.membership_grant(user=removed, owner=alice_owner, role=Membership.Role.VIEWER)
    Membership.objects.filter(user=removed).delete()
    disclosure = accounts.disclosure_standard_ensure()
    for user in (alice, bob, removed):
        accounts.disclosure_acknowledge(user=user, disclosure=disclosure, ip=None, user_agent="t")
    accounts.partner_grant_create(
        owner=alice_owner, partner=carol_partner, scopes=[FLEET], by=oscar
    )
    personal = [FLEET, STATEMENTS]
    keys = {
        "alice key": key_for(by=alice, scopes=personal, owner=alice_owner),
        "bob key": key_for(by=bob, scopes=personal, owner=bob_owner),
        "partner": key_for(by=carol, scopes=[FLEET, STATEMENTS], partner=carol_partner),
    }
    objects = {
        "gpu a1": ("gpu", world.a1.pk),
        "gpu a2": ("gpu", world.a2.pk),
        "gpu x": ("gpu", world.x.pk),
        "gpu b1": ("gpu", world.b1.pk),
        "incident on a2": ("incident", world.gpu_incident.pk),
        "incident on node b": ("incident", world.node_incident.pk),
        "maintenance on cluster a": ("maintenance", world.maintenance.pk),
        "statement alice october": ("statement", money.alice_october.pk),
        "statement bob october": ("statement", money.bob_october.pk),
    }
    users = {"alice": alice, "bob": bob, "removed": removed}
    return objects, users, keys


def portal_url(kind: str, pk: Any) -> str:
    name, arg = {
        "gpu": ("portal:gpu", "gpu_id"),
        "incident": ("portal:incident", "incident_id"),
        "maintenance": ("portal:maintenance-window", "window_id"),
        "statement": ("portal:statement", "statement_id"),
    }[kind]
    return reverse(name, kwargs={arg: pk})


def api_url(kind: str, pk: Any) -> str:
    name = {"maintenance": "maintenance-window"}.get(kind, kind)
    return reverse(f"api:{name}", kwargs={"pk": pk})


def portal_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_each_asker_sees_exactly_its_rows_on_both_edges(matrix):
    objects, users, keys = matrix
    seen: dict[str, set[str]] = {name: set() for name in objects}
    for asker in PORTAL:
        client = portal_client(users[asker])
        for name, (kind, pk) in objects.items():
            status = client.get(portal_url(kind, pk)).status_code
            assert status in (200, 404), (asker, name, status)
            if status == 200:
                seen[name].add(asker)
    for asker in API:
        client = client_for(keys[asker])
        for name, (kind, pk) in objects.items():
            status = client.get(api_url(kind, pk)).status_code
            assert status in (200, 404), (asker, name, status)
            if status == 200:
                seen[name].add(asker)
    assert seen == EXPECTED


def test_the_lists_show_what_the_pages_do(matrix):
    """The edges' lists, read through the same rule, hold the same objects as above."""
    objects, _, keys = matrix
    ids = {pk: name for name, (_, pk) in objects.items()}
    lists = {"gpu": "gpus", "incident": "incidents", "maintenance": "maintenance"}
    lists_statements = "statements"
    for asker in API:
        client = client_for(keys[asker])
        listed = set()
        for path in [*lists.values(), lists_statements]:
            response = client.get(reverse(f"api:{path}"))
            if response.status_code == 200:
                listed |= {ids.get(_pk(row)) for row in response.json()["results"]}
        expected = {name for name, askers in EXPECTED.items() if asker in askers}
        assert listed - {None} == expected, asker


def _pk(row: dict[str, Any]) -> Any:
    value = row["id"]
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return int(value)


def test_nothing_of_another_owner_is_a_403(matrix, bob_owner: Owner):
    """Ids of other owners' things tell nothing: the answer is the one for no such id."""
    objects, users, _ = matrix
    client = portal_client(users["alice"])
    kind, pk = objects["gpu b1"]
    assert client.get(portal_url(kind, pk)).status_code == 404

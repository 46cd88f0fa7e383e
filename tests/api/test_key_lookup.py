"""``api.access.key_for_request`` (the key and what it may read, in one SQL query) against the
reference: the key by the ORM and ``owner_ids_by_orm`` per scope, for keys and grants in every
state the access rules distinguish, after each change."""

from __future__ import annotations

from typing import Any

from accounts import services as accounts
from accounts.models import ApiKey, ApiScope, Membership, Owner, PartnerMember, User
from api import access
from tests.api.conftest import ALL_SCOPES, key_for


def _reference(prefix: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[Any]]]:
    key = ApiKey.objects.select_related("created_by").get(prefix=prefix)
    ids = {scope: access.owner_ids_by_orm(key=key, scope=scope) for scope in key.scopes}
    return _fields(key), _fields(key.created_by), ids


def _fields(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def _prefix(token: str) -> str:
    parsed = accounts.api_key_parse(token)
    assert parsed is not None
    return parsed[0]


def _assert_same(prefixes: list[str]) -> None:
    for prefix in prefixes:
        found = access.key_for_request(prefix=prefix)
        assert found is not None
        key, user, ids = _reference(prefix)
        assert _fields(found.key) == key
        assert found.key.created_by_id == user["id"]
        assert _fields(found.key.created_by) == user
        assert found.owner_ids == ids
        stored = ApiKey.objects.select_related("created_by").get(prefix=prefix)
        assert found.maker_belongs == access.maker_belongs_by_orm(key=stored)
        assert (found.disclosure_version, found.disclosure_acknowledged) == (
            access.disclosure_by_orm(key=stored)
        )
        for scope, reference in ids.items():
            assert [type(i) for i in found.owner_ids[scope]] == [type(i) for i in reference]


def test_the_one_query_reads_what_the_orm_reads(
    alice: User,
    bob: User,
    carol: Any,
    carol_partner: Any,
    alice_owner: Owner,
    bob_owner: Owner,
    oscar: User,
) -> None:
    third = accounts.owner_create(
        kind=Owner.Kind.COMPANY,
        legal_name="Third Ltd",
        contact_email="third@owner.example",
        billing_currency="EUR",
    )
    accounts.membership_grant(user=alice, owner=third, role=Membership.Role.ADMIN)
    tokens = [
        key_for(by=carol, scopes=ALL_SCOPES, partner=carol_partner, name="all"),
        key_for(by=carol, scopes=[ApiScope.FLEET_READ], partner=carol_partner, name="fleet"),
        key_for(by=alice, scopes=ALL_SCOPES, owner=alice_owner, name="alice"),
        key_for(by=alice, scopes=[ApiScope.STATEMENTS_READ], owner=third, name="third"),
        key_for(by=bob, scopes=ALL_SCOPES, owner=bob_owner, name="bob"),
    ]
    prefixes = [_prefix(t) for t in tokens]
    _assert_same(prefixes)  # no grants yet, no disclosure published
    disclosure = accounts.disclosure_standard_ensure()
    _assert_same(prefixes)  # published, acknowledged by no one
    accounts.disclosure_acknowledge(user=alice, disclosure=disclosure, ip=None, user_agent="t")
    _assert_same(prefixes)

    fleet = accounts.partner_grant_create(
        owner=alice_owner, partner=carol_partner, scopes=[ApiScope.FLEET_READ], by=alice
    )
    accounts.partner_grant_create(owner=bob_owner, partner=carol_partner, scopes=ALL_SCOPES, by=bob)
    accounts.partner_grant_create(
        owner=third,
        partner=carol_partner,
        scopes=[ApiScope.STATEMENTS_READ, ApiScope.TELEMETRY_READ],
        by=alice,
    )
    _assert_same(prefixes)
    found = access.key_for_request(prefix=prefixes[0])
    assert found is not None
    assert found.owner_ids[ApiScope.FLEET_READ] == sorted([alice_owner.pk, bob_owner.pk])

    accounts.partner_grant_revoke(grant=fleet, by=alice)  # revoked: gone from both at once
    _assert_same(prefixes)
    Membership.objects.filter(user=alice, owner=third).delete()  # a removed member
    _assert_same(prefixes)
    User.objects.filter(pk=bob.pk).update(is_active=False)  # an inactive maker
    _assert_same(prefixes)
    accounts.api_key_revoke(key=ApiKey.objects.get(prefix=prefixes[2]), by=alice)
    _assert_same(prefixes)
    PartnerMember.objects.filter(user=carol).delete()  # a partner key's maker who left
    _assert_same(prefixes)
    oscar_key = key_for(by=oscar, scopes=ALL_SCOPES, partner=carol_partner, name="operator")
    _assert_same([*prefixes, _prefix(oscar_key)])  # an operator's: no member, still belongs
    assert access.key_for_request(prefix="nosuchprefix") is None

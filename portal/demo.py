"""Demo data: the people of the story. Idempotent, so `make demo` can run it every time.

oscar operates, alice (a company) and bob (a person) own GPUs, carol integrates as a partner.
Later parts of the product add their own demo data here (fleet, telemetry, statements).
"""

from __future__ import annotations

from django.db import transaction

from accounts import services as accounts
from accounts.models import Membership, Owner, Partner, User


def _user(email: str, password: str, full_name: str, *, staff: bool = False) -> User:
    existing = User.objects.filter(email__iexact=email).first()
    if existing is not None:
        return existing
    return accounts.user_create(
        email=email, password=password, full_name=full_name, is_staff=staff, is_superuser=staff
    )


def _owner(legal_name: str, *, kind: str, email: str, currency: str, tz: str) -> Owner:
    existing = Owner.objects.filter(legal_name=legal_name).first()
    if existing is not None:
        return existing
    return accounts.owner_create(
        kind=kind,
        legal_name=legal_name,
        contact_email=email,
        billing_currency=currency,
        time_zone=tz,
    )


@transaction.atomic
def seed_demo(*, password: str) -> dict[str, object]:
    oscar = _user("oscar@steward.example", password, "Oscar Operator", staff=True)
    alice = _user("alice@owner.example", password, "Alice Kim")
    bob = _user("bob@owner.example", password, "Bob Chen")
    carol = _user("carol@partner.example", password, "Carol Diaz")

    alice_co = _owner(
        "Alice Compute Ltd",
        kind=Owner.Kind.COMPANY,
        email="billing@alice.example",
        currency="EUR",
        tz="Europe/Berlin",
    )
    bob_owner = _owner(
        "Bob Chen",
        kind=Owner.Kind.PERSON,
        email="bob@owner.example",
        currency="USD",
        tz="America/New_York",
    )
    accounts.membership_grant(user=alice, owner=alice_co, role=Membership.Role.ADMIN)
    accounts.membership_grant(user=bob, owner=bob_owner, role=Membership.Role.ADMIN)

    partner = Partner.objects.filter(name="Carol Marketplace").first() or accounts.partner_create(
        name="Carol Marketplace", contact_email="api@partner.example"
    )
    accounts.partner_member_add(user=carol, partner=partner)
    return {"operator": oscar, "owners": [alice_co, bob_owner], "partner": partner}

"""Operators find an owner by its account number, which they cannot edit; the demo's owners
have the postal address their statements print."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts import services as accounts
from accounts.models import Owner
from tests.accounts.two_factor import console_login

pytestmark = pytest.mark.django_db


def test_owners_are_listed_and_found_by_account_number(oscar):
    made = accounts.owner_create(
        kind=Owner.Kind.COMPANY,
        legal_name="Numbered Ltd",
        contact_email="n@example.com",
        postal_address="  Numbered Ltd\n1 Road\n",
    )
    made.refresh_from_db()
    assert made.postal_address == "Numbered Ltd\n1 Road"
    client = console_login(Client(), oscar)
    changelist = reverse("admin:accounts_owner_changelist")
    found = client.get(changelist, {"q": str(made.account_number)})
    assert found.status_code == 200
    assert "Numbered Ltd" in found.text
    # A word where the number is searched is not an error, it matches by name.
    assert client.get(changelist, {"q": "Numbered"}).status_code == 200
    page = client.get(reverse("admin:accounts_owner_change", args=[made.pk]))
    assert page.status_code == 200
    assert 'name="account_number"' not in page.text  # shown, not editable
    assert str(made.account_number) in page.text

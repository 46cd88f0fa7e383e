"""Billing actors: a second operator (olga) for four-eyes publishing, and the disclosure."""

from __future__ import annotations

import pytest

from accounts import services as accounts
from accounts.models import Disclosure, User
from tests.conftest import PASSWORD


@pytest.fixture
def olga(db: None) -> User:
    return accounts.user_create(
        email="olga@steward.example", password=PASSWORD, full_name="Olga", is_staff=True
    )


@pytest.fixture
def disclosure(db: None) -> Disclosure:
    return accounts.disclosure_standard_ensure()

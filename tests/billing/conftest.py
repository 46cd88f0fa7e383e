"""Billing actors: a second operator (olga) for four-eyes publishing, and the disclosure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accounts import services as accounts
from accounts.models import Disclosure, User
from tests.conftest import PASSWORD
from tests.telemetry.conftest import windows_truncate


@pytest.fixture
def olga(db: None) -> User:
    return accounts.user_create(
        email="olga@steward.example", password=PASSWORD, full_name="Olga", is_staff=True
    )


@pytest.fixture
def disclosure(db: None) -> Disclosure:
    return accounts.disclosure_standard_ensure()


@pytest.fixture(autouse=True)
def _windows_emptied(request: pytest.FixtureRequest) -> Iterator[None]:
    """Transactional tests end with a flush, which skips the unmanaged, partitioned windows
    table: empty it around them, or later rollup rebuilds would meet windows of GPUs the
    flush removed."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        yield
        return
    request.getfixturevalue("transactional_db")
    windows_truncate()
    yield
    windows_truncate()

"""Portal fixtures: a frozen clock at the world's now, the small fleet, a clean throttle."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.core.cache import cache

from tests.portal import world as world_module


@pytest.fixture
def now() -> Iterator[Any]:
    with time_machine.travel(world_module.NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def world(now: Any, oscar, alice_owner, bob_owner, alice, bob) -> world_module.World:
    return world_module.build(oscar=oscar, alice_owner=alice_owner, bob_owner=bob_owner)


def throttle_clear() -> None:
    """Login throttling lives in Redis across tests: forget it around each one."""
    client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    for key in client.scan_iter(match="*portal:login*"):
        client.delete(key)


@pytest.fixture(autouse=True)
def _throttle_cleared() -> Iterator[None]:
    throttle_clear()
    yield
    throttle_clear()

"""Schemathesis against the live server: generated requests for every operation of the
committed schema, with a valid key, then without one. No 5xx, every answer as the schema
says, and nothing accepted without a valid key."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import ROOT

schema = schemathesis.openapi.from_path(ROOT / "docs" / "openapi.yaml")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    ignored_auth,
]

pytestmark = pytest.mark.slow


@pytest.fixture
def live_world(transactional_db, world, live_server):
    return world


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_keeps_the_contract(case, live_world, live_server):
    token = live_world.keys["partner_granted_a"]
    response = case.call(
        base_url=f"{live_server.url}", headers={"Authorization": f"Bearer {token}"}
    )
    case.validate_response(response, checks=CHECKS)

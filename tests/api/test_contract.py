"""The OpenAPI document: generated from the code, committed, and served with local viewers."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import ROOT

COMMITTED = ROOT / "docs" / "openapi.yaml"


def test_the_committed_schema_is_the_generated_one(tmp_path: Path):
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(generated))
    assert generated.read_text() == COMMITTED.read_text(), (
        "docs/openapi.yaml is stale: run `manage.py spectacular --file docs/openapi.yaml`"
    )


def test_the_schema_is_openapi_3_1_and_covers_only_the_partner_api():
    text = COMMITTED.read_text()
    assert text.startswith("openapi: 3.1.0\n")
    assert "/api/v1/agents/enrol" not in text
    assert "/api/v1/telemetry/batches" not in text
    assert "/api/v1/statements/{id}/csv:" in text
    assert "bearerFormat: stw_live_<prefix>_<secret>" in text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/api/v1/docs", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"),
        ("/api/v1/redoc", "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"),
    ],
)
def test_swagger_ui_and_redoc_load_their_files_from_this_server(client, path, needle):
    response = client.get(path)
    assert response.status_code == 200
    page = response.content.decode()
    assert needle in page
    assert "cdn.jsdelivr.net" not in page
    assert "unpkg.com" not in page


@pytest.mark.django_db
def test_the_schema_is_served(client):
    response = client.get("/api/v1/schema")
    assert response.status_code == 200
    assert b"openapi: 3.1.0" in response.content

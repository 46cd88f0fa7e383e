"""Keys and grants over their lifetime, and how the API answers: problems, throttling,
ETags, CSV, pagination, series figures."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from pypdf import PdfReader

from accounts import services as accounts
from accounts.models import ApiKey, ApiScope, Membership, PartnerGrant
from api.serializers import StatementLineSerializer
from tests.api.conftest import ALL_SCOPES, NOW, client_for, key_for
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db


def test_a_token_is_shown_once_stored_hashed_and_found_by_its_prefix(world, carol):
    key, token = accounts.api_key_create(
        name="books",
        scopes=[ApiScope.STATEMENTS_READ],
        expires_at=NOW + dt.timedelta(days=1),
        by=carol,
        partner=world.partner,
    )
    assert token.startswith(f"stw_live_{key.prefix}_")
    assert len(token) == len("stw_live_") + 12 + 1 + 43
    stored = ApiKey.objects.get(pk=key.pk)
    assert token not in str(stored.__dict__)
    assert stored.secret_sha256 == accounts.api_key_hash(token)
    assert client_for(token).get("/api/v1/statements").status_code == 200
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    response = client_for(wrong).get("/api/v1/statements")
    assert response.status_code == 401
    assert response.json()["detail"] == "This API key is not valid."
    assert response["WWW-Authenticate"] == 'Bearer realm="steward"'


def test_revoking_a_key_or_a_grant_works_on_the_very_next_request(world, alice):
    partner_client = client_for(world.keys["partner_granted_a"])
    assert len(partner_client.get("/api/v1/gpus").json()["results"]) == 1
    grant = PartnerGrant.objects.get(partner=world.partner, revoked_at__isnull=True)
    accounts.partner_grant_revoke(grant=grant, by=alice)
    assert partner_client.get("/api/v1/gpus").json()["results"] == []
    assert partner_client.get(f"/api/v1/gpus/{world.a.gpu.pk}").status_code == 404

    owner_client = client_for(world.keys["owner_a"])
    assert owner_client.get("/api/v1/gpus").status_code == 200
    key = ApiKey.objects.get(owner=world.a.owner)
    accounts.api_key_revoke(key=key, by=alice)
    response = owner_client.get("/api/v1/gpus")
    assert response.status_code == 401
    assert response.json()["detail"] == "This API key was revoked."


def test_a_personal_key_stops_reading_when_its_user_leaves_the_account(world, alice):
    client = client_for(world.keys["owner_a"])
    assert len(client.get("/api/v1/gpus").json()["results"]) == 1
    Membership.objects.filter(user=alice).delete()
    assert client.get("/api/v1/gpus").json()["results"] == []


def test_an_expired_key_is_refused_with_the_reason(world):
    response = client_for(world.keys["expired"]).get("/api/v1/owners")
    assert response.status_code == 401
    assert response.json() == {
        "type": "https://steward.example/problems/unauthorized",
        "title": "Unauthorized",
        "status": 401,
        "detail": "This API key has expired.",
    }


def test_last_use_is_written_at_most_once_a_minute(world, _frozen, django_assert_num_queries):
    client = client_for(world.keys["partner_granted_a"])
    key = ApiKey.objects.get(partner=world.partner, scopes=sorted(ALL_SCOPES), expires_at__gt=NOW)
    client.get("/api/v1/owners")
    key.refresh_from_db()
    assert key.last_used_at == NOW
    _frozen.shift(dt.timedelta(seconds=59))
    client.get("/api/v1/owners")
    key.refresh_from_db()
    assert key.last_used_at == NOW
    _frozen.shift(dt.timedelta(seconds=2))
    client.get("/api/v1/owners")
    key.refresh_from_db()
    assert key.last_used_at == NOW + dt.timedelta(seconds=61)


def test_only_members_and_admins_make_keys_and_grants(world, bob, carol, alice):
    with pytest.raises(ValidationError, match="member of the owner account"):
        key_for(by=bob, scopes=ALL_SCOPES, owner=world.a.owner)
    with pytest.raises(ValidationError, match="admin of the owner account"):
        accounts.partner_grant_create(
            owner=world.a.owner, partner=world.partner, scopes=ALL_SCOPES, by=carol
        )
    with pytest.raises(ValidationError, match="partner's users or an operator"):
        key_for(by=alice, scopes=ALL_SCOPES, partner=world.partner)
    with pytest.raises(ValidationError):
        key_for(by=alice, scopes=["admin:all"], owner=world.a.owner)
    with pytest.raises(ValidationError, match="366 days"):
        key_for(by=alice, scopes=ALL_SCOPES, owner=world.a.owner, days=400)


def test_granting_again_replaces_the_live_grant(world, alice):
    grant = accounts.partner_grant_create(
        owner=world.a.owner, partner=world.partner, scopes=[ApiScope.FLEET_READ], by=alice
    )
    live = PartnerGrant.objects.filter(partner=world.partner, revoked_at__isnull=True)
    assert list(live) == [grant]
    client = client_for(world.keys["partner_granted_a"])
    assert client.get("/api/v1/gpus").status_code == 200
    assert client.get("/api/v1/statements").json()["results"] == []


def test_errors_are_problem_documents(world):
    client = client_for(world.keys["owner_a"])
    response = client.get("/api/v1/gpus?lifecycle_state=melted")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["title"] == "Bad Request"
    assert body["detail"] == 'lifecycle_state: "melted" is not a valid choice.'
    assert body["errors"] == {"lifecycle_state": ['"melted" is not a valid choice.']}

    response = client_for(world.keys["key_lacks_scope"]).get("/api/v1/gpus")
    assert response.status_code == 403
    assert response.json()["detail"] == "This API key lacks the scope fleet:read."

    response = client_for(None).get("/api/v1/gpus")
    assert response.status_code == 401
    assert response.json()["detail"] == "Authentication credentials were not provided."

    response = client_for(None).get("/api/v1/gpus", HTTP_AUTHORIZATION="Token abc")
    assert response.status_code == 401


@override_settings(API_KEY_RATE="3/minute")
def test_each_key_is_throttled_on_its_own_with_retry_after(world):
    client = client_for(world.keys["owner_a"])
    for _ in range(3):
        assert client.get("/api/v1/owners").status_code == 200
    response = client.get("/api/v1/owners")
    assert response.status_code == 429
    assert response["Retry-After"] == "60"
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["detail"] == "Too many requests for this API key; retry in 61 s."
    assert client_for(world.keys["owner_b"]).get("/api/v1/owners").status_code == 200


def test_a_statement_carries_its_basis_and_etag(world):
    client = client_for(world.keys["partner_granted_a"])
    url = f"/api/v1/statements/{world.a.statement.pk}"
    response = client.get(url)
    assert response.status_code == 200
    etag = f'"{world.a.statement.content_sha256}"'
    assert response["ETag"] == etag
    body = response.json()
    assert body["basis"]["period"] == {
        "start": "2026-02-01T00:00:00Z",
        "end": "2026-03-01T00:00:00Z",
    }
    assert body["basis"]["finality"] == "final"
    assert body["basis"]["costs_included"] == ["hosting_fee", "power_cost", "management_fee"]
    assert "can be zero" in body["basis"]["not_guaranteed"]
    assert body["disclosure"]["version"] == "2026-01"
    assert body["disclosure"]["text"].startswith("Owning GPUs does not guarantee any outcome.")
    assert [line["net"] for line in body["lines"]] == ["338.73"]
    assert body["closing_balance"] == "338.73"

    again = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    assert again["ETag"] == etag
    assert client.get(url, HTTP_IF_NONE_MATCH='"other"').status_code == 200


def test_statement_csv_states_its_basis_and_neutralises_formulas(world):
    client = client_for(world.keys["owner_a"])
    response = client.get(f"/api/v1/statements/{world.a.statement.pk}/csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    head = {row[0]: row[1] for row in rows[:13]}
    assert head["period_start"] == "2026-02-01T00:00:00Z"
    assert head["finality"] == "final"
    assert head["disclosure_version"] == "2026-01"
    assert "not guaranteed" in head["not_guaranteed"]
    header = rows[14]
    # The same columns, in the same order, as a line in the JSON document.
    assert header == list(StatementLineSerializer.Meta.fields)
    assert header[-1] == "corrects_line_id"
    line = dict(zip(header, rows[15], strict=True))
    assert line["description"] == "'=SUM(A1)"
    assert line["net"] == "338.73"
    assert rows[-1] == ["closing_balance", "338.73"]
    etag = response["ETag"]
    assert (
        client.get(
            f"/api/v1/statements/{world.a.statement.pk}/csv", HTTP_IF_NONE_MATCH=etag
        ).status_code
        == 304
    )


def test_statement_pdf_is_the_same_bytes_each_time_with_an_etag(world):
    client = client_for(world.keys["owner_a"])
    url = f"/api/v1/statements/{world.a.statement.pk}/pdf"
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    assert response["ETag"] == f'"{hashlib.sha256(response.content).hexdigest()}-pdf"'
    assert response["Content-Disposition"] == (
        f'attachment; filename="statement-2026-02-EUR-{world.a.statement.pk}.pdf"'
    )
    assert response.content.startswith(b"%PDF-1.")
    text = "".join(p.extract_text() for p in PdfReader(io.BytesIO(response.content)).pages)
    assert "Final statement for February 2026" in text
    assert "Results are not guaranteed" in text
    assert world.a.statement.content_sha256 in text
    assert client.get(url).content == response.content
    again = client.get(url, HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304
    assert again.content == b""


def test_lists_page_by_cursor(world, oscar):
    f = s.fleet("par1")
    for i in range(3):
        g = s.gpu(f, f"SN-P{i}", slot=i)
        s.own(g, world.a.owner, 5_000, s.EPOCH)
    client = client_for(world.keys["owner_a"])
    seen = []
    url = "/api/v1/gpus?limit=2&ordering=-serial"
    while url:
        page = client.get(url).json()
        seen += [g["serial"] for g in page["results"]]
        url = page["next"]
    assert seen == ["SN-P2", "SN-P1", "SN-P0", "SN-FRA1"]
    held = client.get(f"/api/v1/gpus?owner={world.a.owner.pk}&cluster=a&held=now").json()
    assert len(held["results"]) == 4
    nowhere = client.get(f"/api/v1/gpus?owner={world.b.owner.pk}").json()
    assert nowhere["results"] == []


def test_series_counts_the_accounting_states_per_hour(world):
    gpu = world.a.gpu
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    s.windows(gpu, start, start + dt.timedelta(hours=1, minutes=30), node=world.a.node)
    s.rebuild(start, start + dt.timedelta(hours=3))
    client = client_for(world.keys["partner_granted_a"])
    response = client.get(
        f"/api/v1/gpus/{gpu.pk}/series",
        {"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T03:00:00Z", "step": "hour"},
    )
    assert response.status_code == 200, response.content
    points = response.json()["points"]
    assert [(p["up_s"], p["no_data_s"], p["availability"], p["utilization"]) for p in points] == [
        (3600, 0, "1.000000", "0.500000"),
        (1800, 1800, "0.500000", "0.500000"),
        (0, 3600, "0.000000", None),
    ]
    assert Decimal(points[0]["busy_gpu_hours"]) == Decimal("0.500000")
    # 60 windows, 59 counter deltas: the first window has no earlier reading to subtract.
    assert Decimal(points[0]["energy_kwh"]) == Decimal("0.590000")
    bad = client.get(
        f"/api/v1/gpus/{gpu.pk}/series",
        {"start": "2026-03-01T00:30:00Z", "end": "2026-03-01T03:00:00Z"},
    )
    assert bad.status_code == 400
    assert bad.json()["detail"] == "start: Align start and end to a whole hour."

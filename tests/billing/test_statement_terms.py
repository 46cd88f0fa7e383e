"""The terms of each GPU line: exact for the worked example, the same on every surface (JSON,
CSV, portal page, PDF, partner API), one line per cluster for a GPU that moved, and read from
the frozen inputs alone (a statement's hash is untouched by them)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
import time_machine
from django.urls import reverse
from pypdf import PdfReader
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.models import Membership, Owner, User
from billing.engine.document import document_from_frozen, sha256_hex
from billing.engine.terms import statement_terms
from billing.models import Statement
from billing.reports import render_csv, render_json, render_pdf, statement_report
from tests.billing import scenario as s
from tests.conftest import PASSWORD
from tests.verify import world as w

pytestmark = pytest.mark.django_db
UTC = dt.UTC


@pytest.fixture
def transfer(oscar, olga, disclosure):
    """Worked example 1 of docs/accounting.md, published: Alice until 12:00:30 on 10 March."""
    s.worked_example(oscar)
    return w.published(2026, 3, oscar, olga)


def test_the_worked_example_s_terms_by_hand(transfer):
    alice, _ = transfer
    found = statement_terms(alice.frozen_inputs)
    assert found is not None
    (terms,) = found
    run = ["2026-03-01T00:00:00Z", "2026-03-10T12:00:30Z"]
    assert terms["span"] == run
    assert terms["up_s"] == 820_830
    assert terms["share"] == {"bps": 10_000, "from": run[0], "to": run[1]}
    # 2.00 × 820,830 s ÷ 3600 = 456.016666…
    assert terms["rentals"] == [
        {
            "from": run[0],
            "to": run[1],
            "rate_per_gpu_hour": "2.000000",
            "up_s": 820_830,
            "amount": "456.016667",
        }
    ]
    assert terms["pool"] == {
        "basis": "up_seconds",
        "cluster_amount": "0.00",
        "gpu_weight": "2678400",
        "total_weight": "2678400",
        "gpu_part": "0.00",
        "run_weight": "820830",
    }
    # The GPU's 744 h × 2.00 = 1,488.00; the run's exact 456.016667, all Alice's.
    assert terms["revenue"] == {
        "gpu_rentals": "1488.00",
        "gpu_total": "1488.00",
        "run_exact": "456.016667",
        "share_exact": "456.016667",
    }
    assert terms["rate_cards"] == [
        {
            "from": run[0],
            "to": run[1],
            "hosting_fee_per_gpu_month": "100.0000",
            "in_service_s": 820_830,
            "waives_operator_incidents": False,
            "waived_incident_s": 0,
            "waives_down": False,
            "waived_down_s": 0,
            "period_s": 2_678_400,
            "energy_kwh": "136.805000000",
            "pue": "1.500",
            "price_per_kwh": "0.200000",
            "management_fee_pct": "10.00",
        }
    ]
    # Reading the terms changes nothing hashed: the content reproduces its hash.
    assert sha256_hex(document_from_frozen(alice.frozen_inputs)) == alice.content_sha256


def test_the_terms_are_the_same_in_the_json_and_the_csv(transfer):
    alice, _ = transfer
    report = statement_report(alice)
    found = statement_terms(alice.frozen_inputs)
    assert found is not None
    (terms,) = found
    data = json.loads(render_json(report))
    assert data["lines"][0]["terms"]["rentals"] == terms["rentals"]
    assert data["lines"][0]["terms"]["cluster_name"] == "A"
    assert data["frozen_inputs"] == alice.frozen_inputs
    text = render_csv(report)
    sections = text.split("\r\n\r\n")
    rows = {
        section.split("\r\n")[0]: list(csv.reader(io.StringIO(section)))[1:]
        for section in sections
        if section.startswith("section,")
    }
    header, line = rows["section,terms"]
    assert dict(zip(header, line, strict=True)) | {"cluster_id": ""} == {
        "position": "1",
        "cluster_id": "",
        "cluster_name": "A",
        "span_start": "2026-03-01T00:00:00Z",
        "span_end": "2026-03-10T12:00:30Z",
        "up_s": "820830",
        "share_bps": "10000",
        "share_from": "2026-03-01T00:00:00Z",
        "share_to": "2026-03-10T12:00:30Z",
        "pool_basis": "up_seconds",
        "pool_cluster_amount": "0.00",
        "pool_gpu_weight": "2678400",
        "pool_total_weight": "2678400",
        "pool_gpu_part": "0.00",
        "pool_run_weight": "820830",
        "gpu_rentals": "1488.00",
        "gpu_total": "1488.00",
        "run_exact": "456.016667",
        "share_exact": "456.016667",
    }
    assert rows["section,rentals"] == [
        ["position", "from", "to", "rate_per_gpu_hour", "up_s", "amount"],
        ["1", "2026-03-01T00:00:00Z", "2026-03-10T12:00:30Z", "2.000000", "820830", "456.016667"],
    ]
    assert rows["section,rate_cards"][1] == [
        "1",
        "2026-03-01T00:00:00Z",
        "2026-03-10T12:00:30Z",
        "100.0000",
        "820830",
        "false",
        "0",
        "false",
        "0",
        "2678400",
        "136.805000000",
        "1.500",
        "0.200000",
        "10.00",
    ]


def _member(owner: Owner, disclosure) -> User:
    user = accounts.user_create(email="owner@alice.example", password=PASSWORD, full_name="A")
    accounts.membership_grant(user=user, owner=owner, role=Membership.Role.ADMIN)
    accounts.disclosure_acknowledge(user=user, disclosure=disclosure, ip=None, user_agent="t")
    return user


def test_a_moved_gpu_s_lines_name_their_cluster_on_the_page_pdf_and_api(
    client, oscar, olga, disclosure
):
    (statement,) = w.moved_clusters(oscar, olga)
    user = _member(statement.owner, disclosure)
    client.force_login(user)
    answer = client.get(reverse("portal:statement", args=[statement.pk]))
    assert answer.status_code == 200
    page = answer.content.decode()
    # The lines table: the moved GPU's two lines named by cluster, each row followed by its
    # folded details (its own span among them) and the terms it is computed from.
    rows = re.findall(
        r'<tr class="line">(.*?)</tr>\s*<tr class="line-terms">(.*?)</tr>', page, re.S
    )
    by_name = {
        re.sub(r"<[^>]+>", "", row.split("</th>")[0]).strip(): details for row, details in rows
    }
    for name, start, end in (
        ("GPU SN-1 (cluster A)", "2026-03-01 00:00 UTC", "2026-03-15 06:00 UTC"),
        ("GPU SN-1 (cluster B)", "2026-03-15 06:00 UTC", "2026-04-01 00:00 UTC"),
    ):
        details = by_name[name]
        assert "what it is computed from" in details
        assert start in details and end in details, (name, details)
    assert "GPU SN-2" in by_name
    assert "cluster A, 2026-03-01 00:00 to 2026-03-15 06:00 UTC" in page
    assert "cluster B, 2026-03-15 06:00 to 2026-04-01 00:00 UTC" in page
    assert (
        "rate card 2026-03-01 00:00 to 2026-04-01 00:00: hosting 120 EUR/month x "
        "(1,447,200 s in service) x share / 2,678,400 s" in page
    )
    assert "power 241.2 kWh x PUE 1.5 x 0.25 EUR/kWh x share" in page
    assert "management 12.5 % of gross" in page
    assert 'href="#verify-h"' in page and 'id="verify-h"' in page
    assert "steward-verify statement.json" in page

    pdf = render_pdf(statement_report(statement))
    assert pdf == render_pdf(statement_report(statement))  # byte-identical
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages)
    assert "What each GPU line is computed from" in text
    assert "cluster B, 2026-03-15 06:00 to 2026-04-01 00:00 UTC" in text
    assert "management 12.5 % of gross" in text
    assert "GPU SN-1 (cluster A) 2026-03-01 00:00 2026-03-15 06:00" in text

    with time_machine.travel(dt.datetime(2026, 4, 2, tzinfo=UTC), tick=False):
        _, token = accounts.api_key_create(
            name="mine",
            scopes=["statements:read"],
            expires_at=dt.datetime(2026, 5, 1, tzinfo=UTC),
            by=user,
            owner=statement.owner,
        )
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        answer = api.get(f"/api/v1/statements/{statement.pk}")
    assert answer.status_code == 200, answer.content
    lines = answer.json()["lines"]
    spans = sorted(
        (line["terms"]["cluster_name"], *line["terms"]["span"])
        for line in lines
        if line["description"] == "GPU SN-1"
    )
    assert spans == [
        ("A", "2026-03-01T00:00:00Z", "2026-03-15T06:00:00Z"),
        ("B", "2026-03-15T06:00:00Z", "2026-04-01T00:00:00Z"),
    ]
    assert Statement.objects.get(pk=statement.pk).content_sha256 == statement.content_sha256

"""Statement reports: one data structure, three renderings, exact for a hand-built statement;
the PDF byte-identical every time (in another process too); a published statement's report
never changes; a real closing freezes what the report needs."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pickle
import subprocess
import sys
from decimal import Decimal

import pytest
import time_machine
from django.db import DatabaseError, transaction
from pypdf import PdfReader

from accounts import services as accounts
from accounts.models import Owner
from billing.models import Period, Statement
from billing.reports import render_csv, render_json, render_pdf, statement_report
from billing.reports.charts import Bar, daily_bars_svg
from billing.reports.pdf import svg_for_pdf
from billing.services.closing import period_close
from billing.services.revenue import pool_add
from fleet.models import IncidentCause
from fleet.services import operations
from portal.wording import forbidden_wording
from tests.billing import reports_world as rw
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
PUBLISHED_AT = dt.datetime(2026, 2, 5, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def built(oscar, olga, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    with time_machine.travel(PUBLISHED_AT, tick=False):
        statement = rw.statement_build(
            owner=owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
        )
    return statement, owner, gpu, disclosure


def pdf_text(data: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


def test_the_csv_is_exactly_the_statement(built):
    statement, owner, gpu, disclosure = built
    expected = f"""statement,{statement.pk}
owner_id,{owner.pk}
currency,EUR
period_start,2026-02-01T00:00:00Z
period_end,2026-02-04T00:00:00Z
finality,final
gross,"the owner's share of the revenue the GPU earned (rentals and pool), before costs"
net,"gross minus hosting fee, power cost and management fee"
costs_included,hosting_fee power_cost management_fee
disclosure_version,{disclosure.version}
disclosure_sha256,{disclosure.text_sha256}
not_guaranteed,"Results are not guaranteed: they depend on utilization, uptime, demand, costs, \
hardware performance and market conditions, and can be zero."
content_sha256,{statement.content_sha256}

position,kind,gpu_id,description,starts_at,ends_at,share_bps,in_service_s,up_s,down_s,\
maintenance_s,no_data_s,availability,utilization,busy_gpu_hours,energy_kwh,gross,hosting_fee,\
power_cost,management_fee,net,corrects_line_id
1,gpu,{gpu.pk},GPU SN-1,2026-02-01T00:00:00Z,2026-02-04T00:00:00Z,10000,259200,194400,0,21600,\
43200,0.818182,0.527778,28.500000,36.600000,108.00,30.00,9.52,10.80,57.68,
2,adjustment,,'=Correction of January,,,,0,0,0,0,0,,,0.000000,0.000000,0.00,0.00,0.00,0.00,\
-5.00,

section,terms
position,cluster_id,cluster_name,span_start,span_end,up_s,share_bps,share_from,share_to,\
pool_basis,pool_cluster_amount,pool_gpu_weight,pool_total_weight,pool_gpu_part,pool_run_weight,\
gpu_rentals,gpu_total,run_exact,share_exact
1,00000000-0000-0000-0000-000000000001,,2026-02-01T00:00:00Z,2026-02-04T00:00:00Z,194400,10000,\
2026-02-01T00:00:00Z,2026-02-04T00:00:00Z,up_seconds,,194400,,0.00,194400,108.00,108.00,\
108.000000,108.000000

section,rentals
position,from,to,rate_per_gpu_hour,up_s,amount
1,2026-02-01T00:00:00Z,2026-02-04T00:00:00Z,2.000000,194400,108.000000

section,rate_cards
position,from,to,hosting_fee_per_gpu_month,in_service_s,waives_operator_incidents,\
waived_incident_s,waives_down,waived_down_s,period_s,energy_kwh,pue,price_per_kwh,\
management_fee_pct
1,2026-02-01T00:00:00Z,2026-02-04T00:00:00Z,30.0000,259200,false,0,false,0,259200,36.600000,\
1.300,0.200000,10.00

section,payouts
reference,paid_on,amount
PAY-1,2026-02-02,20.00

section,events
kind,id,title,cause,starts_at,ends_at,gpus
maintenance,7,Cooling service,,2026-02-02T00:00:00Z,2026-02-02T06:00:00Z,SN-1

section,days
day,in_service_s,up_s,down_s,maintenance_s,no_data_s,availability,utilization
2026-02-01T00:00:00Z,86400,86400,0,0,0,1.000000,0.500000
2026-02-02T00:00:00Z,86400,64800,0,21600,0,1.000000,0.250000
2026-02-03T00:00:00Z,86400,43200,0,0,43200,0.500000,1.000000

gross_total,108.00
hosting_fee_total,30.00
power_cost_total,9.52
management_fee_total,10.80
opening_balance,50.00
lines_total,57.68
adjustments_total,-5.00
payouts_total,20.00
closing_balance,82.68
"""
    assert render_csv(statement_report(statement)) == expected.replace("\n", "\r\n")


def test_the_json_is_the_same_data(built):
    statement, owner, _, disclosure = built
    data = json.loads(render_json(statement_report(statement)))
    assert data["statement"] == {
        "id": str(statement.pk),
        "owner_id": str(owner.pk),
        "owner_name": "Alice Compute Ltd",
        "currency": "EUR",
        "status": "published",
        "computed_at": "2026-02-05T09:00:00Z",
        "published_at": "2026-02-05T09:00:00Z",
        "content_sha256": statement.content_sha256,
    }
    assert data["basis"]["finality"] == "final"
    assert data["basis"]["period"] == {
        "start": "2026-02-01T00:00:00Z",
        "end": "2026-02-04T00:00:00Z",
    }
    assert data["basis"]["costs_included"] == ["hosting_fee", "power_cost", "management_fee"]
    assert data["disclosure"] == {
        "version": disclosure.version,
        "text_sha256": disclosure.text_sha256,
        "text": disclosure.text,
    }
    assert data["totals"] == {
        "gross": "108.00",
        "hosting_fee": "30.00",
        "power_cost": "9.52",
        "management_fee": "10.80",
        "opening_balance": "50.00",
        "lines_total": "57.68",
        "adjustments_total": "-5.00",
        "payouts_total": "20.00",
        "closing_balance": "82.68",
    }
    assert [(line["kind"], line["net"]) for line in data["lines"]] == [
        ("gpu", "57.68"),
        ("adjustment", "-5.00"),
    ]
    assert data["lines"][0]["availability"] == "0.818182"
    assert data["events"] == [
        {
            "kind": "maintenance",
            "id": 7,
            "title": "Cooling service",
            "cause": "",
            "starts_at": "2026-02-02T00:00:00Z",
            "ends_at": "2026-02-02T06:00:00Z",
            "gpus": ["SN-1"],
        }
    ]
    assert [(d["day"], d["availability"], d["utilization"]) for d in data["days"]] == [
        ("2026-02-01T00:00:00Z", "1.000000", "0.500000"),
        ("2026-02-02T00:00:00Z", "1.000000", "0.250000"),
        ("2026-02-03T00:00:00Z", "0.500000", "1.000000"),
    ]
    # Canonical: sorted keys, two-space indent, one final newline.
    text = render_json(statement_report(statement)).decode()
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_the_pdf_states_every_part(built):
    statement, _, _, disclosure = built
    text = pdf_text(render_pdf(statement_report(statement)))
    for needle in (
        "Statement for 2026-02-01 00:00 to 2026-02-04 00:00",
        "Final statement for 2026-02-01 00:00 to 2026-02-04 00:00, published 2026-02-05 09:00 "
        "UTC; it does not change.",
        "Gross (your share of revenue, before costs) 108.00 EUR",
        "Hosting fee (deducted) 30.00 EUR",
        "Power cost (deducted) 9.52 EUR",
        "Management fee (deducted) 10.80 EUR",
        "Balance carried from before 50.00 EUR",
        "Balance carried forward (total) 82.68 EUR",
        "GPU SN-1 2026-02-01 00:00 2026-02-04 00:00 100.00 % 72.0 54.0 0.0 6.0 12.0 81.82 % "
        "52.78 % 36.600",
        "GPU SN-1 2026-02-01 00:00 108.00 EUR 30.00 EUR 9.52 EUR 10.80 EUR 57.68 EUR",
        "-5.00 EUR =Correction of January manual",
        "2026-02-02 PAY-1 20.00 EUR",
        "Maintenance Cooling service - 2026-02-02 00:00 2026-02-02 06:00 SN-1",
        "Availability by day",
        "Utilization by day",
        "How each figure is computed",
        "Results are not guaranteed: they depend on utilization, uptime, demand, costs,",
        f"Risk disclosure, version {disclosure.version}",
        f"Disclosure SHA-256: {disclosure.text_sha256}",
        f"Statement content SHA-256: {statement.content_sha256}",
    ):
        assert needle in " ".join(text.split()), needle
    assert forbidden_wording(text, markup=False) == []


def test_the_pdf_is_byte_identical_in_this_process_and_another(built):
    statement = built[0]
    report = statement_report(statement)
    first = render_pdf(report)
    assert render_pdf(statement_report(statement)) == first
    code = (
        "import django, pickle, sys; django.setup(); "
        "from billing.reports import render_pdf; "
        "sys.stdout.buffer.write(render_pdf(pickle.load(sys.stdin.buffer)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    other = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        input=pickle.dumps(report),
        capture_output=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout
    assert other == first
    # The creation date is the statement's, not the clock's.
    assert b"/CreationDate (D:20260205090000Z" in first


def test_a_published_report_never_changes(built):
    statement, owner, gpu, _ = built
    before = [render_csv(statement_report(statement)), render_json(statement_report(statement))]
    pdf = render_pdf(statement_report(statement))
    # Everything around it changes: the account's name, the GPU's serial, a new disclosure.
    Owner.objects.filter(pk=owner.pk).update(legal_name="Renamed Ltd")
    type(gpu).objects.filter(pk=gpu.pk).update(serial="SN-9")
    accounts.disclosure_publish(version="2099-01", text="Owning GPUs does not guarantee anything.")
    with time_machine.travel(PUBLISHED_AT + dt.timedelta(days=40), tick=False):
        after = statement_report(statement)
        assert [render_csv(after), render_json(after)] == before
        assert render_pdf(after) == pdf
    # And the statement itself cannot be rewritten, by any path.
    with pytest.raises(DatabaseError), transaction.atomic():
        Statement.objects.filter(pk=statement.pk).update(frozen_inputs={})


def test_a_draft_reads_as_preliminary(oscar, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    with time_machine.travel(PUBLISHED_AT, tick=False):
        draft = rw.statement_build(owner=owner, gpu=gpu, disclosure=disclosure)
    report = statement_report(draft)
    assert report.basis.finality == "preliminary"
    assert report.published_at is None
    text = pdf_text(render_pdf(report))
    assert "PRELIMINARY - a draft for 2026-02-01 00:00 to 2026-02-04 00:00, computed " in text
    assert "Preliminary figures for" in text
    assert "finality,preliminary\r\n" in render_csv(report)


def test_a_real_closing_freezes_the_days_and_the_events(oscar, disclosure):
    """Closing cuts the frozen cells at midnight and records the incident; the days add up
    to the line."""
    start, end = dt.datetime(2026, 2, 1, tzinfo=dt.UTC), dt.datetime(2026, 2, 3, tzinfo=dt.UTC)
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    s.own(gpu, owner, 10_000, s.EPOCH)
    s.card(f, oscar)
    s.windows(gpu, start - dt.timedelta(minutes=1), end, node=f.node)
    s.rebuild(start, end)
    operations.incident_open(
        scope=gpu,
        title="ECC errors",
        cause=IncidentCause.HARDWARE,
        started_at=dt.datetime(2026, 2, 1, 22, tzinfo=dt.UTC),
        by=oscar,
    )
    period = Period.objects.create(start=start, end=end)
    pool_add(
        cluster=f.cluster,
        period=period,
        amount=Decimal("48.00"),
        currency="EUR",
        description="",
        by=oscar,
    )
    with time_machine.travel(dt.datetime(2026, 2, 4, tzinfo=dt.UTC), tick=False):
        period_close(period=period, by=oscar)
    statement = Statement.objects.get(owner=owner, period=period)
    report = statement_report(statement)
    assert report.owner_name == "Alice Compute Ltd"
    assert report.days is not None
    assert [(d.day.day, d.up_s, d.down_s) for d in report.days] == [
        (1, 22 * 3600, 2 * 3600),
        (2, 0, 24 * 3600),
    ]
    line = report.lines[0]
    assert sum(d.up_s for d in report.days) == line["up_s"]
    assert sum(d.down_s for d in report.days) == line["down_s"]
    assert report.events is not None
    assert [(e.kind, e.title, e.cause, e.ends_at, e.gpus) for e in report.events] == [
        ("incident", "ECC errors", "hardware", None, ("SN-1",)),
    ]


def test_the_pdf_charts_are_the_portal_svg_within_what_fpdf2_draws():
    bars = [Bar(dt.datetime(2026, 2, d, tzinfo=dt.UTC), Decimal(d * 10)) for d in range(1, 4)]
    svg = daily_bars_svg(
        [*bars, Bar(dt.datetime(2026, 2, 4, tzinfo=dt.UTC), None)],
        title="Availability",
        desc="By day",
        unit="%",
        id_prefix="a",
        y_max=Decimal(100),
    )
    assert svg.count("<rect ") == 4  # three bars and the frame; no bar for the gap
    assert "<pattern" not in svg
    assert (
        svg_for_pdf(svg)
        == svg.replace(
            '<title id="a-title">Availability</title><desc id="a-desc">By day</desc>', ""
        )
        .replace('font-family="system-ui, sans-serif"', 'font-family="dejavu"')
        .encode()
    )


def test_a_long_list_of_gpus_is_cut_to_fit_a_pdf_cell():
    from billing.reports.pdf import _few

    assert _few(("A1", "A2")) == "A1, A2"
    serials = tuple(f"T{i}" for i in range(10))
    assert _few(serials) == "10 GPUs: T0, T1, T2, T3, T4, T5, T6, T7 and 2 more"


def test_a_long_per_gpu_table_repeats_its_heading_and_cuts_what_does_not_fit():
    from billing.reports.pdf import _grid
    from billing.reports.tagged import TaggedPdf

    pdf = TaggedPdf()
    pdf.add_page()
    rows = [[f"GPU SN-{i:04d}", f"{i}.0"] for i in range(300)]
    rows[7][0] = "GPU " + "X" * 80
    _grid(pdf, ["GPU", "Up h"], rows, (40, 20), numeric=(False, True), size=6.5)
    pages = [page.extract_text() for page in PdfReader(io.BytesIO(bytes(pdf.output()))).pages]
    assert len(pages) > 1
    assert all(page.startswith("GPU Up h\n") for page in pages)
    text = "\n".join(pages)
    assert all(f"GPU SN-{i:04d} {i}.0" in text for i in range(300) if i != 7)
    cut = next(line for line in text.splitlines() if line.startswith("GPU XX"))
    assert cut.endswith("... 7.0") and len(cut) < 60

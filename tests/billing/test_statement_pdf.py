"""The statement PDF as a document: who issues it and to whom, its number, the payout of its
balance, embedded fonts, tags for screen readers, and pages that are not near-empty."""

from __future__ import annotations

import datetime as dt
import io
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from pypdf import PdfReader
from pypdf.generic import ArrayObject, IndirectObject

from accounts.models import Owner
from billing.models import Payout, Period, Statement
from billing.reports import render_pdf, statement_report
from billing.reports.report import statement_number
from billing.reports.text import when
from tests.billing import reports_world as rw
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
PUBLISHED_AT = dt.datetime(2026, 2, 5, 9, 0, tzinfo=dt.UTC)
NORTHWIND = {
    "legal_name": "Northwind Compute GmbH",
    "address": ["Hafenstraße 1", "20457 Hamburg", "Germany"],
    "registration": "Amtsgericht Hamburg HRB 123456",
}


@pytest.fixture
def built(oscar, olga, disclosure, settings):
    settings.STEWARD_OPERATOR = NORTHWIND
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    Owner.objects.filter(pk=owner.pk).update(
        postal_address="12 High Street\n\n  Leeds LS1 1AA \nUnited Kingdom"
    )
    owner.refresh_from_db()
    with time_machine.travel(PUBLISHED_AT, tick=False):
        statement = rw.statement_build(
            owner=owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
        )
    return statement, owner


def words(data: bytes) -> str:
    """The PDF's text, whitespace collapsed (lines wrap where the font says)."""
    pages = PdfReader(io.BytesIO(data)).pages
    return " ".join(" ".join(page.extract_text() for page in pages).split())


def test_it_names_the_operator_the_owner_and_the_statement(built):
    statement, owner = built
    report = statement_report(statement)
    assert report.statement_number == f"{owner.account_number}-20260201-EUR"
    assert report.owner_address == ("12 High Street", "Leeds LS1 1AA", "United Kingdom")
    text = words(render_pdf(report))
    for needle in (
        # The operator, from settings.STEWARD_OPERATOR; "ß" prints as itself.
        "Northwind Compute GmbH Hafenstraße 1 20457 Hamburg Germany Amtsgericht Hamburg HRB 123456",
        f"Statement no. {owner.account_number}-20260201-EUR",
        f"Account no. {owner.account_number}",
        "Period 2026-02-01 00:00 to 2026-02-04 00:00 (UTC)",
        "Published 2026-02-05 09:00 UTC",
        "Statement to Alice Compute Ltd 12 High Street Leeds LS1 1AA United Kingdom",
        "Payout of this statement's balance No payout of this balance is recorded yet.",
        # The running header of every page.
        f"Northwind Compute GmbH - statement {owner.account_number}-20260201-EUR - account "
        f"{owner.account_number} - Alice Compute Ltd - EUR",
    ):
        assert needle in text, needle
    assert "Payout date" not in text


def test_the_statement_number_is_stable_and_says_what_it_numbers(built):
    statement, owner = built
    first = statement_report(statement).statement_number
    Owner.objects.filter(pk=owner.pk).update(legal_name="Renamed Ltd", postal_address="")
    assert statement_report(statement).statement_number == first
    assert (
        statement_number(
            account_number=100042,
            period_start=dt.datetime(2026, 3, 1, 6, 30, tzinfo=dt.UTC),
            currency="USD",
        )
        == "100042-20260301T063000-USD"
    )


def test_the_payout_of_its_balance_is_printed_with_its_date_and_reference(built, oscar, olga):
    statement, owner = built

    def paid(reference: str, on: dt.date, currency: str = "EUR") -> None:
        Payout.objects.create(
            owner=owner, currency=currency, amount=Decimal("10.00"), paid_on=on, reference=reference
        )

    paid("BEFORE-END", dt.date(2026, 2, 3))  # in the period: on this statement already
    paid("PAY-FEB-1", dt.date(2026, 2, 4))  # the day the period ends: pays its balance
    paid("PAY-FEB-2", dt.date(2026, 2, 9))
    paid("OTHER-CCY", dt.date(2026, 2, 9), "USD")
    paid("PAY-NEXT", dt.date(2026, 2, 12))  # after the next statement's period: pays that one
    _next_published(statement, owner, oscar, olga, end=dt.datetime(2026, 2, 10, tzinfo=dt.UTC))

    report = statement_report(statement)
    assert [p["reference"] for p in report.paid_by] == ["PAY-FEB-1", "PAY-FEB-2"]
    text = words(render_pdf(report))
    assert "Payout date 2026-02-04, 2026-02-09" in text
    assert "Payout reference PAY-FEB-1, PAY-FEB-2" in text
    assert (
        "Payout of this statement's balance Paid on Reference Amount "
        "2026-02-04 PAY-FEB-1 10.00 EUR 2026-02-09 PAY-FEB-2 10.00 EUR"
    ) in text
    assert render_pdf(statement_report(statement)) == render_pdf(report)  # byte-identical


def _next_published(statement: Statement, owner: Owner, oscar, olga, *, end: dt.datetime) -> None:
    period = Period.objects.create(start=statement.period.end, end=end)
    Statement.objects.create(
        owner=owner,
        period=period,
        currency="EUR",
        status=Statement.Status.PUBLISHED,
        opening_balance=Decimal("0.00"),
        lines_total=Decimal("0.00"),
        adjustments_total=Decimal("0.00"),
        payouts_total=Decimal("0.00"),
        closing_balance=Decimal("0.00"),
        frozen_inputs={},
        content_sha256="0" * 64,
        disclosure_version=statement.disclosure_version,
        disclosure_sha256=statement.disclosure_sha256,
        computed_at=end,
        requested_by=oscar,
        requested_at=end,
        approved_by=olga,
        published_at=end,
    )


def test_a_draft_has_no_payout(oscar, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    with time_machine.travel(PUBLISHED_AT, tick=False):
        draft = rw.statement_build(owner=owner, gpu=gpu, disclosure=disclosure)
    Payout.objects.create(
        owner=owner, currency="EUR", amount=Decimal(1), paid_on=dt.date(2026, 2, 9), reference="P"
    )
    report = statement_report(draft)
    assert report.paid_by == ()
    text = words(render_pdf(report))
    assert "A draft is not paid out: payouts follow publication." in text
    assert f"Computed {when(draft.computed_at)}" in text
    assert "Status preliminary (draft)" in text
    assert "(no postal address on file)" in text


def _fonts(resources: Any) -> list[Any]:
    found: list[Any] = [f.get_object() for f in resources.get("/Font", {}).values()]
    for xobject in resources.get("/XObject", {}).values():
        xobject = xobject.get_object()
        if "/Resources" in xobject:
            found += _fonts(xobject["/Resources"].get_object())
    return found


def test_every_font_is_embedded(built):
    reader = PdfReader(io.BytesIO(render_pdf(statement_report(built[0]))))
    fonts = [f for page in reader.pages for f in _fonts(page["/Resources"])]
    assert {f["/BaseFont"].split("+")[1] for f in fonts} == {
        "DejaVuSansCondensed",
        "DejaVuSansCondensedBold",
    }
    for font in fonts:  # the charts' text too: no core font, which a reader substitutes
        assert font["/Subtype"] == "/Type0"
        descriptor = font["/DescendantFonts"][0].get_object()["/FontDescriptor"].get_object()
        assert "/FontFile2" in descriptor


def _elements(elem: Any) -> list[Any]:
    out: list[Any] = []
    kids = elem.get("/K", ArrayObject())
    for kid in kids if isinstance(kids, ArrayObject) else [kids]:
        if isinstance(kid, IndirectObject):
            kid = kid.get_object()
            out.append(kid)
            out += _elements(kid)
    return out


def test_it_is_a_tagged_pdf_with_title_and_language(built):
    statement, owner = built
    reader = PdfReader(io.BytesIO(render_pdf(statement_report(statement))))
    root: Any = reader.trailer["/Root"]
    assert bool(root["/MarkInfo"]["/Marked"])
    assert root["/Lang"] == "en"
    assert bool(root["/ViewerPreferences"]["/DisplayDocTitle"])
    assert reader.metadata is not None
    assert reader.metadata.title == (
        f"Statement {owner.account_number}-20260201-EUR for 2026-02-01 00:00 to "
        "2026-02-04 00:00 - Alice Compute Ltd"
    )
    tree: Any = root["/StructTreeRoot"]
    (document,) = tree["/K"]
    assert document.get_object()["/S"] == "/Document"
    elements = _elements(document.get_object())
    kinds = Counter(str(e["/S"]) for e in elements)
    assert kinds["/H1"] == 1
    assert kinds["/H2"] == 9
    assert kinds["/Table"] == 6
    assert kinds["/TH"] == 2 + 12 + 7 + 4 + 3 + 6  # every heading cell, once
    assert kinds["/Figure"] == 2
    figures = [e for e in elements if e["/S"] == "/Figure"]
    assert [f["/Alt"].split(",")[0] for f in figures] == [
        "Availability by day",
        "Utilization by day",
    ]
    # Tables hold rows, rows hold cells.
    for table in (e for e in elements if e["/S"] == "/Table"):
        rows = _elements(table)
        assert {r["/S"] for r in rows if r["/P"].get_object() == table} == {"/TR"}
    # Every marked sequence on a page is an element, found from the page through the
    # parent tree at its MCID, on that page.
    nums = tree["/ParentTree"]["/Nums"]
    parents = {nums[i]: nums[i + 1] for i in range(0, len(nums), 2)}
    leaves = 0
    for page in reader.pages:
        content: bytes = page.get_contents().get_data()  # type: ignore[union-attr]
        marked = content.count(b"<</MCID ")
        on_page = parents[page["/StructParents"]]
        assert len(on_page) == marked
        for mcid, elem in enumerate(on_page):
            elem = elem.get_object()
            assert list(elem["/K"]) == [mcid]
            assert elem.raw_get("/Pg").idnum == page.indirect_reference.idnum  # type: ignore[union-attr]
            leaves += 1
        # The running header and footer, and rules, are artifacts.
        assert content.count(b"/Artifact BMC") >= 2
    assert leaves == sum(1 for e in elements if "/Pg" in e and e["/S"] not in ("/Table", "/TR"))


def test_no_near_empty_page_and_the_gpu_table_heading_repeats(built):
    """Eighty GPU lines: every page but the last is well filled, and each page the per-GPU
    tables continue on starts with their heading."""
    report = statement_report(built[0])
    gpu = report.lines[0]
    lines = tuple({**gpu, "position": n, "description": f"GPU SN-{n:03d}"} for n in range(1, 81))
    many = replace(report, lines=(*lines, report.lines[1]), terms=(None,) * 81)
    pages = [p.extract_text() for p in PdfReader(io.BytesIO(render_pdf(many))).pages]
    counts = [len(p.splitlines()) for p in pages]
    assert len(pages) >= 4
    assert min(counts[:-1]) >= 30, counts
    assert counts[-1] >= 8, counts
    text = "\n".join(pages)
    assert all(f"GPU SN-{n:03d} 2026-02-01 00:00 108.00 EUR" in text for n in range(1, 81))
    for page in pages[1:]:
        body = page.splitlines()[1:]  # under the running header
        if body[0].startswith("GPU SN-"):
            pytest.fail(f"a page continues a table without its heading: {body[:2]}")

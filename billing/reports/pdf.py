"""A statement report as PDF, with fpdf2 (pure Python, from PyPI alone).

Byte-identical for the same statement: the creation date is the statement's (published, else
computed), the file id is derived from its content hash, fpdf2 uses no randomness and the
charts are the SVG the portal shows (``billing.reports.charts``), drawn by fpdf2's SVG reader.
Text is set in the PDF core fonts (Helvetica), which cover Windows-1252: the few characters
outside it are replaced by their nearest equivalent (``−`` by ``-``), never dropped silently.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from decimal import Decimal

from fpdf import FPDF
from fpdf.enums import Align, TableBordersLayout, XPos, YPos
from fpdf.fonts import FontFace

from billing.reports.report import COST_LABELS, Report
from billing.reports.text import (
    FIGURE_NOTES,
    amount,
    availability_bars,
    event_rows,
    hours,
    line_places,
    pct,
    status_line,
    terms_parts,
    utilization_bars,
    when,
)

INK = (27, 36, 48)
MUTED = (90, 102, 117)
RULE = (213, 219, 227)
HEAD_FILL = (238, 241, 245)
HEAD = FontFace(emphasis="BOLD", fill_color=HEAD_FILL)
_REPLACE = str.maketrans(
    {"−": "-", "÷": "/", "≤": "<=", "≥": ">=", "→": "->", "×": "x", "\u00a0": " ", "\u202f": " "}
)
_SVG_META = re.compile(r"<(title|desc)\b[^>]*>.*?</\1>", re.DOTALL)


def pdf_text(text: str) -> str:
    """What the core fonts can show: Windows-1252, anything else as ``?``."""
    return text.translate(_REPLACE).encode("cp1252", "replace").decode("cp1252")


def svg_for_pdf(svg: str) -> bytes:
    """The portal's SVG without its ``title``/``desc`` (screen-reader text, which fpdf2 does
    not draw and logs about); the drawing is unchanged."""
    return _SVG_META.sub("", svg).encode()


class _StatementPdf(FPDF):
    def __init__(self, report: Report) -> None:
        super().__init__(orientation="portrait", unit="mm", format="A4")
        self.report = report
        self.core_fonts_encoding = "cp1252"
        self._id = hashlib.sha256(f"pdf:{report.content_sha256}".encode()).hexdigest()[:32]

    def file_id(self) -> str:
        return f"<{self._id}><{self._id}>"

    def header(self) -> None:
        self.set_font("helvetica", "", 7)
        self.set_text_color(*MUTED)
        r = self.report
        self.cell(
            0,
            4,
            pdf_text(f"Steward statement {r.statement_id} - {r.owner_name} - {r.currency}"),
            new_x=XPos.LMARGIN,
            new_y=YPos.NEXT,
        )
        self.set_text_color(*INK)
        self.ln(2)

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("helvetica", "", 7)
        self.set_text_color(*MUTED)
        r = self.report
        self.cell(
            0,
            4,
            pdf_text(
                f"{r.basis.finality.capitalize()} figures for {r.period_label}. "
                f"Results are not guaranteed. Content SHA-256 {r.content_sha256}. "
                f"Page {self.page_no()}/{{nb}}"
            ),
            align=Align.C,
        )
        self.set_text_color(*INK)


def render_pdf(report: Report) -> bytes:
    pdf = _StatementPdf(report)
    stamp = report.published_at or report.computed_at
    pdf.set_creation_date(stamp)
    pdf.set_title(pdf_text(f"Statement {report.period_label} - {report.owner_name}"))
    pdf.set_author("Steward")
    pdf.set_subject(pdf_text(f"{report.basis.finality} statement, {report.currency}"))
    pdf.set_lang("en")
    pdf.set_auto_page_break(auto=True, margin=16)
    pdf.set_margins(15, 12, 15)
    pdf.add_page()
    _summary(pdf, report)
    _lines(pdf, report)
    _terms(pdf, report)
    _adjustments(pdf, report)
    _events(pdf, report)
    _charts(pdf, report)
    _basis(pdf, report)
    _disclosure(pdf, report)
    return bytes(pdf.output())


def _h1(pdf: FPDF, text: str) -> None:
    pdf.set_font("helvetica", "B", 16)
    pdf.multi_cell(0, 8, pdf_text(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def _h2(pdf: FPDF, text: str) -> None:
    if pdf.get_y() > pdf.h - 50:
        pdf.add_page()
    pdf.ln(3)
    pdf.set_font("helvetica", "B", 11)
    pdf.cell(0, 6, pdf_text(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.set_draw_color(*RULE)
    pdf.line(pdf.l_margin, pdf.get_y(), pdf.w - pdf.r_margin, pdf.get_y())
    pdf.ln(1.5)


def _para(pdf: FPDF, text: str, *, size: float = 8.5, style: str = "") -> None:
    pdf.set_font("helvetica", style, size)
    pdf.multi_cell(0, size * 0.5, pdf_text(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def _table(
    pdf: FPDF,
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[float],
    *,
    numeric: Sequence[bool],
    size: float = 7,
) -> None:
    pdf.set_font("helvetica", "", size)
    aligns = tuple("RIGHT" if n else "LEFT" for n in numeric)
    with pdf.table(
        col_widths=tuple(widths),
        text_align=aligns,
        headings_style=HEAD,
        borders_layout=TableBordersLayout.HORIZONTAL_LINES,
        line_height=size * 0.55,
        padding=0.8,
    ) as table:
        row = table.row()
        for text in head:
            row.cell(pdf_text(text))
        for values in rows:
            row = table.row()
            for text in values:
                row.cell(pdf_text(text))


def _grid(
    pdf: FPDF,
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[float],
    *,
    numeric: Sequence[bool],
    size: float,
) -> None:
    """A table of one-line rows, drawn cell by cell.

    fpdf2's ``table`` lays out every cell as a paragraph (~8 ms of CPU a row): a 1,000-GPU
    statement took ~8 s of CPU that way, ~23 s on a loaded machine. Per-GPU rows are short
    figures, so here each cell is one line, cut with "..." in the rare case it would not fit
    (the CSV and JSON carry every value whole); the heading row is repeated on every page, as
    ``table`` does.
    """
    height = size * 0.55 + 1.6
    aligns = tuple(Align.R if n else Align.L for n in numeric)

    def heading() -> None:
        pdf.set_font("helvetica", "B", size)
        pdf.set_fill_color(*HEAD_FILL)
        for text, width, align in zip(head, widths, aligns, strict=True):
            pdf.cell(width, height, _fit(pdf, pdf_text(text), width), align=align, fill=True)
        pdf.ln(height)
        pdf.set_font("helvetica", "", size)

    pdf.set_draw_color(*RULE)
    margin, pdf.c_margin = pdf.c_margin, 0.8
    heading()
    for values in rows:
        if pdf.get_y() + height > pdf.page_break_trigger:
            pdf.add_page()
            heading()
        for text, width, align in zip(values, widths, aligns, strict=True):
            pdf.cell(width, height, _fit(pdf, pdf_text(text), width), align=align)
        pdf.ln(height)
        pdf.line(pdf.l_margin, pdf.get_y(), pdf.l_margin + sum(widths), pdf.get_y())
    pdf.c_margin = margin


def _fit(pdf: FPDF, text: str, width: float) -> str:
    room = width - 2 * pdf.c_margin
    if pdf.get_string_width(text) <= room:
        return text
    while text and pdf.get_string_width(text + "...") > room:
        text = text[:-1]
    return text + "..."


def _summary(pdf: FPDF, r: Report) -> None:
    _h1(pdf, f"Statement for {r.period_label}")
    _para(pdf, f"{r.owner_name} - {r.currency} - statement {r.statement_id}", size=9)
    pdf.ln(1)
    _para(pdf, status_line(r), size=9.5, style="B")
    _para(pdf, r.basis.sentence, size=8.5)
    _h2(pdf, "Summary")
    rows: list[list[str]] = [
        ["Gross (your share of revenue, before costs)", amount(r.gross_total, r.currency)],
        *[
            [f"{label.capitalize()} (deducted)", amount(r.costs_total[name], r.currency)]
            for name, label in COST_LABELS.items()
        ],
        ["Net of the GPU lines (gross minus costs)", amount(r.lines_total, r.currency)],
        ["Balance carried from before", amount(r.opening_balance, r.currency)],
        ["Adjustments", amount(r.adjustments_total, r.currency)],
        ["Payouts in the period (deducted)", amount(r.payouts_total, r.currency)],
        ["Balance carried forward (total)", amount(r.closing_balance, r.currency)],
    ]
    _table(pdf, ["Figure", "Amount"], rows, (130, 50), numeric=(False, True), size=8.5)
    _para(pdf, f"Basis: {r.basis.sentence}", size=7.5)


def _lines(pdf: FPDF, r: Report) -> None:
    _h2(pdf, "Per GPU")
    gpu_lines = [line for line in r.lines if line["kind"] == "gpu"]
    if not gpu_lines:
        _para(pdf, "No GPU lines on this statement.")
        return
    places = line_places(r)
    _grid(
        pdf,
        [
            "GPU",
            "From",
            "Until",
            "Share",
            "In service h",
            "Up h",
            "Down h",
            "Maint. h",
            "No data h",
            "Avail.",
            "Util.",
            "kWh",
        ],
        [
            [
                places[line["position"]].label,
                when(places[line["position"]].starts_at, short=True),
                when(places[line["position"]].ends_at, short=True),
                pct(Decimal(line["share_bps"]) / 10_000),
                hours(line["in_service_s"]),
                hours(line["up_s"]),
                hours(line["down_s"]),
                hours(line["maintenance_s"]),
                hours(line["no_data_s"]),
                pct(line["availability"]),
                pct(line["utilization"]),
                f"{line['energy_kwh'].quantize(Decimal('0.001'))}",
            ]
            for line in gpu_lines
        ],
        (27, 20.5, 20.5, 13, 14.5, 11, 11, 11, 12.5, 13, 12.5, 13.5),
        numeric=(False, False, False, *([True] * 9)),
        size=6.5,
    )
    pdf.ln(2)
    _grid(
        pdf,
        ["GPU", "From", "Gross", "Hosting fee", "Power cost", "Management fee", "Net"],
        [
            [
                places[line["position"]].label,
                when(places[line["position"]].starts_at, short=True),
                *(
                    amount(line[name], r.currency)
                    for name in ("gross", "hosting_fee", "power_cost", "management_fee", "net")
                ),
            ]
            for line in gpu_lines
        ],
        (30, 25, 25, 25, 25, 25, 25),
        numeric=(False, False, True, True, True, True, True),
        size=6.5,
    )
    _para(pdf, f"Basis: {r.basis.sentence}", size=7)


def _terms(pdf: FPDF, r: Report) -> None:
    """Under the lines, what each is computed from: a short paragraph per line, wrapped
    here phrase by phrase into one-line cells (fast for a statement of many GPUs)."""
    found = [
        (line, terms) for line, terms in zip(r.lines, r.terms, strict=True) if terms is not None
    ]
    if not found:
        return
    _h2(pdf, "What each GPU line is computed from")
    _para(
        pdf,
        "Every figure above follows from these terms by the accounting rules; the JSON "
        "download holds them whole, and steward-verify recomputes the statement from it.",
        size=7,
    )
    size = 6.5
    height = size * 0.5
    room = pdf.w - pdf.l_margin - pdf.r_margin
    for line, terms in found:
        pdf.ln(0.8)
        phrases = [f"{line['position']}. {line['description']}:", *terms_parts(terms, r.currency)]
        rows: list[str] = []
        pdf.set_font("helvetica", "", size)
        for phrase in (pdf_text(p) for p in phrases):
            joined = f"{rows[-1]}; {phrase}" if rows and not rows[-1].endswith(":") else None
            if rows and rows[-1].endswith(":"):
                joined = f"{rows[-1]} {phrase}"
            if joined is not None and pdf.get_string_width(joined) <= room:
                rows[-1] = joined
            else:
                rows.append(_fit(pdf, phrase if not rows else f"    {phrase}", room))
        for text in rows:
            if pdf.get_y() + height > pdf.page_break_trigger:
                pdf.add_page()
            pdf.cell(room, height, text, new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def _adjustments(pdf: FPDF, r: Report) -> None:
    _h2(pdf, "Adjustments and payouts")
    if r.adjustments:
        _table(
            pdf,
            ["Amount", "Reason", "Source", "Corrects"],
            [
                [
                    amount(Decimal(a["amount"]), r.currency),
                    a["reason"],
                    a["source"],
                    f"statement {a['corrects_statement']}" if a["corrects_statement"] else "-",
                ]
                for a in r.adjustments
            ],
            (28, 82, 25, 45),
            numeric=(True, False, False, False),
        )
    else:
        _para(pdf, "No adjustments in this period.")
    pdf.ln(1)
    if r.payouts:
        _table(
            pdf,
            ["Paid on", "Reference", "Amount"],
            [
                [p["paid_on"], p["reference"], amount(Decimal(p["amount"]), r.currency)]
                for p in r.payouts
            ],
            (40, 90, 50),
            numeric=(False, False, True),
        )
    else:
        _para(pdf, "No payouts in this period.")


def _events(pdf: FPDF, r: Report) -> None:
    _h2(pdf, "Incidents and maintenance in the period")
    if r.events is None:
        _para(pdf, "Not recorded with this statement (computed before they were frozen).")
        return
    rows = [
        [*row[:5], _few(event.gpus)] for row, event in zip(event_rows(r), r.events, strict=True)
    ]
    if not rows:
        _para(pdf, "None touched your GPUs in this period.")
        return
    _table(
        pdf,
        ["Kind", "Title", "Cause", "Started", "Ended", "Your GPUs"],
        rows,
        (20, 52, 22, 28, 28, 30),
        numeric=(False,) * 6,
    )


def _few(serials: Sequence[str], most: int = 8) -> str:
    """A table cell must fit on a page: a long list is cut (the CSV and JSON have it all)."""
    if len(serials) <= most:
        return ", ".join(serials)
    return f"{len(serials)} GPUs: {', '.join(serials[:most])} and {len(serials) - most} more"


def _charts(pdf: FPDF, r: Report) -> None:
    _h2(pdf, "Daily availability and utilization (UTC)")
    if r.days is None:
        _para(pdf, "Daily figures are not available for this statement.")
        return
    for svg in (availability_bars(r), utilization_bars(r)):
        if pdf.get_y() > pdf.h - 60:
            pdf.add_page()
        title = re.search(r"<title[^>]*>(.*?)</title>", svg)
        _para(pdf, title.group(1) if title else "", size=8, style="B")
        pdf.image(io.BytesIO(svg_for_pdf(svg)), x=pdf.l_margin, w=pdf.epw)
        pdf.ln(1)
    _para(
        pdf,
        "Availability = up / (in service - maintenance); utilization = mean GPU utilization "
        "over up time. A gap is a day with no such time. The CSV and JSON downloads list the "
        "same figures by day.",
        size=7,
    )


def _basis(pdf: FPDF, r: Report) -> None:
    _h2(pdf, "How each figure is computed")
    for name, note in FIGURE_NOTES:
        _para(pdf, f"{name}: {note}", size=7.5)
    _para(pdf, r.basis.sentence, size=7.5, style="B")


def _disclosure(pdf: FPDF, r: Report) -> None:
    _h2(pdf, f"Risk disclosure, version {r.disclosure.version}")
    _para(pdf, r.disclosure.text or "(text not found)", size=8)
    pdf.ln(1)
    _para(pdf, f"Disclosure SHA-256: {r.disclosure.sha256}", size=7)
    _para(pdf, f"Statement content SHA-256: {r.content_sha256}", size=7, style="B")
    _para(
        pdf,
        "The content hash is the SHA-256 of the statement's canonical content; recomputing "
        "the statement from its frozen inputs gives the same hash.",
        size=7,
    )

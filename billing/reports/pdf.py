"""A statement report as PDF, with fpdf2 (pure Python, from PyPI alone).

What it prints: a letterhead (the operator's legal name, address and registration; the
statement number, the owner's account number, the period, the payout of the balance once
recorded; the owner's name and postal address), then the summary, the lines, the terms,
adjustments and payouts, incidents and maintenance, the daily charts, the basis and the
disclosure.

Byte-identical for the same report: the creation date is the statement's (published, else
computed), the file id is derived from its content hash, fpdf2 uses no randomness, the font
subsets depend only on the text, and the charts are the SVG the portal shows
(``billing.reports.charts``), drawn by fpdf2's SVG reader.

Fonts embedded and tags for screen readers (``billing.reports.tagged``): headings
``H1``/``H2``, paragraphs ``P``, tables ``Table``/``TR``/``TH``/``TD``, charts ``Figure`` with
their title and description as alternate text; the running header and footer and repeated
table headings are artifacts.

No near-empty pages: blocks are drawn line by line with explicit page breaks, a heading is
kept with the start of what follows it, a table starts on a new page only when its heading
and first rows do not fit, and a table's heading repeats on every page it continues on.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from decimal import Decimal

from fpdf import FPDF
from fpdf.enums import Align, MethodReturnValue, XPos, YPos

from billing.reports.report import COST_LABELS, Report
from billing.reports.tagged import FONT, TaggedPdf
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
# A table starts on a new page unless its heading and this many rows fit on this one.
MIN_ROWS = 3
_SVG_META = re.compile(r"<(title|desc)\b[^>]*>.*?</\1>", re.DOTALL)
_SVG_TEXT = re.compile(r"<(title|desc)\b[^>]*>(.*?)</\1>", re.DOTALL)
_VIEW_BOX = re.compile(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"')
_SVG_FONT = re.compile(r'font-family="[^"]*"')


def svg_for_pdf(svg: str) -> bytes:
    """The portal's SVG without its ``title``/``desc`` (screen-reader text, which fpdf2 does
    not draw and logs about: the PDF gives it to the chart's ``Figure`` tag instead), its
    text in the embedded font (a browser's ``system-ui`` would be fpdf2's Helvetica, a font
    not embedded); the drawing is unchanged."""
    return _SVG_FONT.sub(f'font-family="{FONT}"', _SVG_META.sub("", svg)).encode()


class _StatementPdf(TaggedPdf):
    def __init__(self, report: Report) -> None:
        super().__init__()
        self.report = report
        self._id = hashlib.sha256(f"pdf:{report.content_sha256}".encode()).hexdigest()[:32]

    def file_id(self) -> str:
        return f"<{self._id}><{self._id}>"

    def header(self) -> None:
        r = self.report
        with self.artifact():
            self.set_font(FONT, "", 7)
            self.set_text_color(*MUTED)
            self.cell(
                0,
                4,
                f"{r.operator.legal_name} - statement {r.statement_number} - account "
                f"{r.account_number} - {r.owner_name} - {r.currency}",
                new_x=XPos.LMARGIN,
                new_y=YPos.NEXT,
            )
            self.set_text_color(*INK)
        self.ln(2)

    def footer(self) -> None:
        self.set_y(-12)
        r = self.report
        with self.artifact():
            self.set_font(FONT, "", 7)
            self.set_text_color(*MUTED)
            self.cell(
                0,
                4,
                f"{r.basis.finality.capitalize()} figures for {r.period_label}. "
                f"Results are not guaranteed. Content SHA-256 {r.content_sha256}. "
                f"Page {self.page_no()}/{{nb}}",
                align=Align.C,
            )
            self.set_text_color(*INK)


def render_pdf(report: Report) -> bytes:
    pdf = _StatementPdf(report)
    pdf.set_creation_date(report.published_at or report.computed_at)
    pdf.set_title(
        f"Statement {report.statement_number} for {report.period_label} - {report.owner_name}"
    )
    pdf.set_author(report.operator.legal_name)
    pdf.set_subject(f"{report.basis.finality} statement, {report.currency}")
    pdf.set_creator("Steward")
    pdf.add_page()
    _letterhead(pdf, report)
    _summary(pdf, report)
    _paid(pdf, report)
    _lines(pdf, report)
    _terms(pdf, report)
    _adjustments(pdf, report)
    _events(pdf, report)
    _charts(pdf, report)
    _basis(pdf, report)
    _disclosure(pdf, report)
    return bytes(pdf.output())


# Blocks of text -------------------------------------------------------------------------


def _wrap(pdf: FPDF, text: str, width: float) -> list[str]:
    lines = pdf.multi_cell(width, 1, text, dry_run=True, output=MethodReturnValue.LINES)
    if not isinstance(lines, list):
        raise TypeError("fpdf2's multi_cell(output=LINES) gives a list of lines")
    return [str(line) for line in lines] or [""]


def _block(
    pdf: TaggedPdf,
    lines: Sequence[str],
    *,
    height: float,
    kind: str = "/P",
    keep: int = 4,
) -> None:
    """Pre-cut lines as one element, on as few pages as they need: a block of ``keep`` lines
    or fewer is not split; a longer one is continued, as another element, on the next page."""
    if len(lines) <= keep and height * len(lines) > pdf.room():
        pdf.add_page()
    rest = list(lines)
    while rest:
        fits = max(int(pdf.room() // height), 0)
        if fits == 0:
            pdf.add_page()
            continue
        chunk, rest = rest[:fits], rest[fits:]
        with pdf.marked(kind):
            for text in chunk:
                pdf.cell(0, height, text, new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def _para(
    pdf: TaggedPdf, text: str, *, size: float = 8.5, style: str = "", kind: str = "/P"
) -> None:
    pdf.set_font(FONT, style, size)
    _block(pdf, _wrap(pdf, text, pdf.epw), height=size * 0.5, kind=kind)


def _h1(pdf: TaggedPdf, text: str) -> None:
    pdf.set_font(FONT, "B", 15)
    _block(pdf, _wrap(pdf, text, pdf.epw), height=7.5, kind="/H1")


def _h2(pdf: TaggedPdf, text: str, *, keep: float = 25) -> None:
    """A section heading, on a new page when the page has no room for ``keep`` mm of what
    follows it."""
    if pdf.room() < 12 + keep:
        pdf.add_page()
    pdf.ln(3)
    pdf.set_font(FONT, "B", 11)
    with pdf.marked("/H2"):
        pdf.cell(0, 6, text, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    with pdf.artifact():
        pdf.set_draw_color(*RULE)
        pdf.line(pdf.l_margin, pdf.get_y(), pdf.w - pdf.r_margin, pdf.get_y())
    pdf.ln(1.5)


# Tables ----------------------------------------------------------------------------------


def _grid(
    pdf: TaggedPdf,
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[float],
    *,
    numeric: Sequence[bool],
    size: float,
    wrap: bool = False,
) -> None:
    """A table drawn cell by cell and tagged ``Table``/``TR``/``TH``/``TD``.

    fpdf2's ``table`` lays out every cell as a paragraph (~8 ms of CPU a row): a 1,000-GPU
    statement took ~8 s of CPU that way, ~23 s on a loaded machine, and it cannot tag its
    cells. Without ``wrap`` each cell is one line, cut with "..." in the rare case it would
    not fit (per-GPU rows are short figures; the CSV and JSON carry every value whole); with
    ``wrap`` a cell wraps onto more lines (reasons, titles). A row never splits across pages;
    the heading row is repeated on every page the table continues on (as an artifact: it is
    read once). The table starts on a new page when its heading and first rows do not fit.
    """
    line = size * 0.55
    pad = 1.6
    aligns = tuple(Align.R if n else Align.L for n in numeric)
    pdf.set_font(FONT, "", size)
    margin, pdf.c_margin = pdf.c_margin, 0.8

    def cut(values: Sequence[str]) -> list[list[str]]:
        if not wrap:
            return [[_fit(pdf, text, width)] for text, width in zip(values, widths, strict=True)]
        return [_wrap(pdf, text, width) for text, width in zip(values, widths, strict=True)]

    def heading(*, again: bool) -> None:
        pdf.set_font(FONT, "B", size)
        pdf.set_fill_color(*HEAD_FILL)
        if again:
            with pdf.artifact():
                _row(pdf, head_cells, widths, aligns, line, pad, fill=True)
        else:
            with pdf.group("/TR"):
                _row(pdf, head_cells, widths, aligns, line, pad, fill=True, kind="/TH")
        pdf.set_font(FONT, "", size)

    laid = [cut(values) for values in rows]
    heights = [_height(cells, line, pad) for cells in laid]
    pdf.set_font(FONT, "B", size)
    head_cells = [_wrap(pdf, text, width) for text, width in zip(head, widths, strict=True)]
    first = _height(head_cells, line, pad) + sum(heights[:MIN_ROWS])
    pdf.set_font(FONT, "", size)
    if first > pdf.room():
        pdf.add_page()
    pdf.set_draw_color(*RULE)
    with pdf.group("/Table"):
        heading(again=False)
        for cells, height in zip(laid, heights, strict=True):
            if height > pdf.room():
                pdf.add_page()
                heading(again=True)
            with pdf.group("/TR"):
                _row(pdf, cells, widths, aligns, line, pad, kind="/TD")
            with pdf.artifact():
                pdf.line(pdf.l_margin, pdf.get_y(), pdf.l_margin + sum(widths), pdf.get_y())
    pdf.c_margin = margin


def _row(
    pdf: TaggedPdf,
    cells: Sequence[Sequence[str]],
    widths: Sequence[float],
    aligns: Sequence[Align],
    line: float,
    pad: float,
    *,
    fill: bool = False,
    kind: str | None = None,
) -> None:
    """One row of cells, each one or more lines, top-aligned; the cursor ends below it."""
    top = pdf.get_y()
    height = _height(cells, line, pad)
    x = pdf.l_margin
    for lines, width, align in zip(cells, widths, aligns, strict=True):
        pdf.set_xy(x, top)
        if fill:
            pdf.rect(x, top, width, height, style="F")
        if kind is None:
            _cell_lines(pdf, lines, width, align, line, pad)
        else:
            with pdf.marked(kind):
                _cell_lines(pdf, lines, width, align, line, pad)
        x += width
    pdf.set_xy(pdf.l_margin, top + height)


def _height(cells: Sequence[Sequence[str]], line: float, pad: float) -> float:
    return max(len(cell) for cell in cells) * line + pad


def _cell_lines(
    pdf: FPDF, lines: Sequence[str], width: float, align: Align, line: float, pad: float
) -> None:
    x, y = pdf.get_x(), pdf.get_y() + pad / 2
    for n, text in enumerate(lines):
        pdf.set_xy(x, y + n * line)
        pdf.cell(width, line, text, align=align)


def _fit(pdf: FPDF, text: str, width: float) -> str:
    room = width - 2 * pdf.c_margin
    if pdf.get_string_width(text) <= room:
        return text
    while text and pdf.get_string_width(text + "...") > room:
        text = text[:-1]
    return text + "..."


# Sections --------------------------------------------------------------------------------


def _letterhead(pdf: TaggedPdf, r: Report) -> None:
    """Who issues the statement (left), what it is (right), whom it is for (below)."""
    top = pdf.get_y()
    with pdf.marked("/P"):
        for text, style, size, height in (
            (r.operator.legal_name, "B", 11, 5.5),
            *((line, "", 8, 4) for line in r.operator.address),
            (r.operator.registration, "", 7, 4),
        ):
            pdf.set_font(FONT, style, size)
            pdf.set_text_color(*(MUTED if size == 7 else INK))
            for part in _wrap(pdf, text, 90):
                pdf.cell(90, height, part, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        pdf.set_text_color(*INK)
    left_end = pdf.get_y()
    facts = [
        ("Statement no.", r.statement_number),
        ("Account no.", str(r.account_number)),
        ("Period", f"{r.period_label} (UTC)"),
        ("Currency", r.currency),
        (
            ("Published", when(r.published_at))
            if r.published_at is not None
            else ("Computed", when(r.computed_at))
        ),
        ("Status", "final" if r.final else "preliminary (draft)"),
    ]
    if r.paid_by:
        facts += [
            ("Payout date", ", ".join(p["paid_on"] for p in r.paid_by)),
            ("Payout reference", ", ".join(p["reference"] for p in r.paid_by)),
        ]
    pdf.set_xy(110, top)
    with pdf.marked("/P"):
        for label, value in facts:
            pdf.set_x(110)
            pdf.set_font(FONT, "", 7.5)
            pdf.set_text_color(*MUTED)
            pdf.cell(25, 4, label)
            pdf.set_text_color(*INK)
            pdf.set_font(FONT, "B" if label == "Statement no." else "", 7.5)
            pdf.cell(60, 4, _fit(pdf, value, 60), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.set_y(max(left_end, pdf.get_y()) + 4)
    with pdf.marked("/P"):
        pdf.set_font(FONT, "", 7)
        pdf.set_text_color(*MUTED)
        pdf.cell(0, 3.5, "Statement to", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        pdf.set_text_color(*INK)
        pdf.set_font(FONT, "B", 9.5)
        pdf.cell(0, 5, r.owner_name, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        pdf.set_font(FONT, "", 8.5)
        for text in r.owner_address or ("(no postal address on file)",):
            pdf.cell(0, 4.2, text, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.ln(4)


def _summary(pdf: TaggedPdf, r: Report) -> None:
    _h1(pdf, f"Statement for {r.period_label}")
    _para(pdf, status_line(r), size=9.5, style="B")
    _para(pdf, r.basis.sentence, size=8.5)
    _h2(pdf, "Summary", keep=60)
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
    _grid(pdf, ["Figure", "Amount"], rows, (130, 50), numeric=(False, True), size=8.5)


def _paid(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, "Payout of this statement's balance", keep=15)
    if r.paid_by:
        _grid(
            pdf,
            ["Paid on", "Reference", "Amount"],
            [
                [p["paid_on"], p["reference"], amount(Decimal(p["amount"]), r.currency)]
                for p in r.paid_by
            ],
            (40, 90, 50),
            numeric=(False, False, True),
            size=8,
            wrap=True,
        )
    elif r.final:
        _para(pdf, "No payout of this balance is recorded yet.", size=8)
    else:
        _para(pdf, "A draft is not paid out: payouts follow publication.", size=8)


def _lines(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, "Per GPU", keep=30)
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
    pdf.ln(1)
    _para(pdf, f"Basis: {r.basis.sentence}", size=7)


def _terms(pdf: TaggedPdf, r: Report) -> None:
    """Under the lines, what each is computed from: a short paragraph per line, wrapped
    here phrase by phrase into one-line cells (fast for a statement of many GPUs)."""
    found = [
        (line, terms) for line, terms in zip(r.lines, r.terms, strict=True) if terms is not None
    ]
    if not found:
        return
    _h2(pdf, "What each GPU line is computed from", keep=20)
    _para(
        pdf,
        "Every figure above follows from these terms by the accounting rules; the JSON "
        "download holds them whole, and steward-verify recomputes the statement from it.",
        size=7,
    )
    size = 6.5
    room = pdf.epw
    for line, terms in found:
        pdf.ln(0.8)
        phrases = [f"{line['position']}. {line['description']}:", *terms_parts(terms, r.currency)]
        rows: list[str] = []
        pdf.set_font(FONT, "", size)
        for phrase in phrases:
            joined = f"{rows[-1]}; {phrase}" if rows and not rows[-1].endswith(":") else None
            if rows and rows[-1].endswith(":"):
                joined = f"{rows[-1]} {phrase}"
            if joined is not None and pdf.get_string_width(joined) <= room:
                rows[-1] = joined
            else:
                rows.append(_fit(pdf, phrase if not rows else f"    {phrase}", room))
        _block(pdf, rows, height=size * 0.5)


def _adjustments(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, "Adjustments and payouts in the period", keep=20)
    if r.adjustments:
        _grid(
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
            size=7,
            wrap=True,
        )
    else:
        _para(pdf, "No adjustments in this period.")
    pdf.ln(1)
    if r.payouts:
        _grid(
            pdf,
            ["Paid on", "Reference", "Amount"],
            [
                [p["paid_on"], p["reference"], amount(Decimal(p["amount"]), r.currency)]
                for p in r.payouts
            ],
            (40, 90, 50),
            numeric=(False, False, True),
            size=7,
            wrap=True,
        )
    else:
        _para(pdf, "No payouts in this period.")


def _events(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, "Incidents and maintenance in the period", keep=20)
    if r.events is None:
        _para(pdf, "Not recorded with this statement (computed before they were frozen).")
        return
    rows = [
        [*row[:5], _few(event.gpus)] for row, event in zip(event_rows(r), r.events, strict=True)
    ]
    if not rows:
        _para(pdf, "None touched your GPUs in this period.")
        return
    _grid(
        pdf,
        ["Kind", "Title", "Cause", "Started", "Ended", "Your GPUs"],
        rows,
        (20, 52, 22, 28, 28, 30),
        numeric=(False,) * 6,
        size=7,
        wrap=True,
    )


def _few(serials: Sequence[str], most: int = 8) -> str:
    """A table cell must fit on a page: a long list is cut (the CSV and JSON have it all)."""
    if len(serials) <= most:
        return ", ".join(serials)
    return f"{len(serials)} GPUs: {', '.join(serials[:most])} and {len(serials) - most} more"


def _charts(pdf: TaggedPdf, r: Report) -> None:
    charts = [] if r.days is None else [availability_bars(r), utilization_bars(r)]
    heights = [_chart_height(pdf, svg) for svg in charts]
    _h2(pdf, "Daily availability and utilization (UTC)", keep=(heights[0] + 6) if heights else 10)
    if r.days is None:
        _para(pdf, "Daily figures are not available for this statement.")
        return
    for svg, height in zip(charts, heights, strict=True):
        if height + 6 > pdf.room():
            pdf.add_page()
        found = {m.group(1): m.group(2) for m in _SVG_TEXT.finditer(svg)}
        _para(pdf, found.get("title", ""), size=8, style="B")
        alt = ". ".join(v for v in (found.get("title"), found.get("desc")) if v)
        with pdf.marked("/Figure", alt=alt):
            pdf.image(io.BytesIO(svg_for_pdf(svg)), x=pdf.l_margin, w=pdf.epw)
        pdf.ln(1)
    _para(
        pdf,
        "Availability = up / (in service - maintenance); utilization = mean GPU utilization "
        "over up time. A gap is a day with no such time. The CSV and JSON downloads list the "
        "same figures by day.",
        size=7,
    )


def _chart_height(pdf: FPDF, svg: str) -> float:
    box = _VIEW_BOX.search(svg)
    if box is None:
        return 60.0
    return pdf.epw * float(box.group(2)) / float(box.group(1))


def _basis(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, "How each figure is computed", keep=20)
    for name, note in FIGURE_NOTES:
        _para(pdf, f"{name}: {note}", size=7.5)
    _para(pdf, r.basis.sentence, size=7.5, style="B")


def _disclosure(pdf: TaggedPdf, r: Report) -> None:
    _h2(pdf, f"Risk disclosure, version {r.disclosure.version}", keep=20)
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

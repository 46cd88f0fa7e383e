"""An fpdf2 document tagged for screen readers, in an embedded font.

fpdf2 (2.8) builds only a flat structure tree itself (a ``Figure`` per image with alternate
text). ``TaggedPdf`` builds the nested one — ``Table`` > ``TR`` > ``TH``/``TD``, headings,
paragraphs, figures — with fpdf2's own structure objects (``fpdf.structure_tree``, internal to
fpdf2: pinned with it), marks what it draws with ``BDC``/``EMC`` and a marked-content id per
page, and keeps running headers and rules out of the tree as artifacts.

Text is set in DejaVu Sans Condensed (``fonts/``, Bitstream Vera licence), embedded as a
subset, so every character prints as itself on any reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fpdf import FPDF, ViewerPreferences
from fpdf.errors import FPDFException
from fpdf.structure_tree import StructElem, StructureTreeBuilder
from fpdf.syntax import PDFObject

# fontTools logs every subset it makes at INFO, some 20 lines per PDF: not worth a log line.
logging.getLogger("fontTools").setLevel(logging.WARNING)

FONTS = Path(__file__).parent / "fonts"
FONT = "dejavu"


class _Tree(StructureTreeBuilder):
    """fpdf2's structure tree, holding nested elements: every element is written out."""

    def __iter__(self) -> Iterator[PDFObject]:
        yield self.struct_tree_root
        yield self.doc_struct_elem
        yield self.struct_tree_root.parent_tree
        stack = list(reversed(self.doc_struct_elem.k))
        while stack:
            elem = stack.pop()
            yield elem
            stack.extend(reversed([k for k in elem.k if isinstance(k, StructElem)]))


class TaggedPdf(FPDF):
    """An A4 page in the embedded font, whose content is tagged as it is drawn."""

    def __init__(self) -> None:
        super().__init__(orientation="portrait", unit="mm", format="A4")
        self.struct_builder = _Tree()
        self._parent: StructElem = self.struct_builder.doc_struct_elem
        self.add_font(FONT, "", FONTS / "DejaVuSansCondensed.ttf")
        self.add_font(FONT, "B", FONTS / "DejaVuSansCondensed-Bold.ttf")
        self.set_font(FONT, "", 8.5)
        self.set_auto_page_break(auto=True, margin=16)
        self.set_margins(15, 12, 15)
        self.set_lang("en")
        self.viewer_preferences = ViewerPreferences(display_doc_title=True)

    @contextmanager
    def group(self, kind: str) -> Iterator[None]:
        """A structure element (``/Table``, ``/TR``) holding those opened inside it."""
        elem = StructElem(struct_type=kind, parent=self._parent, kids=[], page_number=self.page)
        self._parent.k.append(elem)
        outer, self._parent = self._parent, elem
        try:
            yield
        finally:
            self._parent = outer

    @contextmanager
    def marked(self, kind: str, *, alt: str | None = None) -> Iterator[None]:
        """What is drawn inside is one structure element of ``kind`` (``/P``, ``/H1``,
        ``/TD``, ``/Figure``…), all on the current page."""
        page = self.page
        spids = self.struct_builder.spid_per_page_number
        spid = spids.setdefault(page, len(spids))
        on_page = self.struct_builder.struct_tree_root.parent_tree.nums[spid]
        mcid = len(on_page)
        elem = StructElem(
            struct_type=kind, parent=self._parent, kids=[mcid], page_number=page, alt=alt
        )
        elem.pg = self.pages[page]  # type: ignore[assignment]  # fpdf2 sets it only at output
        self._parent.k.append(elem)
        on_page.append(elem)
        self.pages[page].struct_parents = spid
        self._set_min_pdf_version("1.4")  # /MarkInfo
        self._out(f"{kind} <</MCID {mcid}>> BDC")
        yield
        if self.page != page:
            raise FPDFException(f"{kind} content ran onto the next page")
        self._out("EMC")

    @contextmanager
    def artifact(self) -> Iterator[None]:
        """Drawn but not read out: running headers, rules, repeated headings."""
        self._out("/Artifact BMC")
        yield
        self._out("EMC")

    def room(self) -> float:
        return self.page_break_trigger - self.get_y()

"""The wording rule: nothing an owner reads promises an outcome.

Owning GPUs guarantees nothing; Steward never shows a projection, forecast or expected return,
and never uses words that sell certainty ("guaranteed", "risk-free", "passive income", "ROI").
``forbidden_wording`` finds such wording in text (an HTML page, an email) so that tests can
check every owner-facing page and message. "Guarantee" is allowed only when denied — "not
guaranteed", "no guarantee", "does not guarantee" — because the disclosures must say exactly
that; so are "no projection" and "no forecast", which the standard disclosure says.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

# (name, pattern) — matched case-insensitively against visible text.
FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("risk-free", r"\brisk[\s\-‐–]*free\b"),
    ("passive income", r"\bpassive[\s\-]+income\b"),
    ("ROI", r"\bROI\b"),
    ("return on investment", r"\breturns?\s+on\s+(?:your\s+)?investment\b"),
    ("expected return", r"\bexpected\s+(?:returns?|earnings|income|profits?|payouts?)\b"),
    (
        "projection",
        r"\bproject(?:ed|ion|ions|s)?\s+(?:earnings|income|returns?|revenue|payouts?|profits?)\b",
    ),
    ("projection", r"\bprojections?\b"),
    ("forecast", r"\bforecast(?:s|ed|ing)?\b"),
    ("estimated earnings", r"\bestimated\s+(?:earnings|income|returns?|payouts?)\b"),
    ("will earn", r"\b(?:will|going\s+to)\s+(?:earn|make|generate)\b"),
    ("sure thing", r"\b(?:sure\s+thing|can(?:'|’)?t\s+lose|no[\s\-]+risk)\b"),
)
# Rules whose words the disclosures themselves use, denied ("shows no projection or forecast").
_DENIABLE = frozenset({"projection", "forecast"})
_GUARANTEE = re.compile(r"\bguarantee(?:d|s|ing)?\b", re.IGNORECASE)
# A "guarantee" preceded closely by one of these is a denial, which the disclosures need.
_DENIAL = re.compile(
    r"\b(?:not|no|never|nor|without|cannot|can(?:'|’)?t|doesn(?:'|’)?t|don(?:'|’)?t|isn(?:'|’)?t|"
    r"aren(?:'|’)?t|won(?:'|’)?t)\b(?:\W+\w+){0,3}\W*$",
    re.IGNORECASE,
)
_HIDDEN = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_ATTRS = re.compile(r'\b(?:title|aria-label|alt|placeholder|value)="([^"]*)"', re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    rule: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.rule}: …{self.excerpt}…"


def visible_text(markup: str) -> str:
    """What a person (or a screen reader) gets from a page: text plus labelling attributes."""
    without_code = _HIDDEN.sub(" ", markup)
    labels = " ".join(_ATTRS.findall(without_code))
    text = _TAG.sub(" ", without_code)
    return re.sub(r"\s+", " ", html.unescape(f"{text} {labels}")).strip()


def forbidden_wording(text: str, *, markup: bool = True) -> list[Finding]:
    """Every forbidden phrase in ``text`` (HTML unless ``markup`` is False)."""
    plain = visible_text(text) if markup else re.sub(r"\s+", " ", text)
    findings: list[Finding] = []
    for rule, pattern in FORBIDDEN:
        for match in re.finditer(pattern, plain, re.IGNORECASE):
            if rule in _DENIABLE and _denied(plain, match.start()):
                continue
            findings.append(Finding(rule, _excerpt(plain, match.start(), match.end())))
    for match in _GUARANTEE.finditer(plain):
        if not _denied(plain, match.start()):
            findings.append(Finding("guarantee", _excerpt(plain, match.start(), match.end())))
    return findings


def _denied(text: str, start: int) -> bool:
    return _DENIAL.search(text[max(0, start - 40) : start]) is not None


def _excerpt(text: str, start: int, end: int) -> str:
    return text[max(0, start - 30) : end + 30]


# ---- the basis of every earnings figure ------------------------------------------------------

# An amount of money as the portal writes it: "1,234.56 EUR", "−12.00 USD" (ISO 4217 code).
MONEY = re.compile(r"[−-]?\b\d{1,3}(?:,\d{3})*\.\d{2}\s+[A-Z]{3}\b")
_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\s+\d{4}"
)
# What the text a figure points to must say (docs/portal.md, "The earnings rule").
BASIS_NEEDS: tuple[tuple[str, str], ...] = (
    ("period", rf"{_MONTH}|\d{{4}}-\d{{2}}-\d{{2}}"),
    ("final or preliminary", r"\b(?:final|preliminary)\b"),
    ("gross", r"\bgross\b"),
    ("net", r"\bnet\b"),
    ("costs included", r"\bhosting\b.*\bpower\b.*\bmanagement\b"),
    ("not guaranteed", r"\bnot\s+guaranteed\b"),
)
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)


@dataclass(frozen=True)
class EarningsCheck:
    figures: int  # amounts found inside marked earnings regions
    findings: list[Finding]


class _Regions(HTMLParser):
    """Splits a page's visible text into what lies inside ``data-basis`` regions (each with
    the id of the element stating its basis) and what lies outside them, and collects the
    text of every element with an id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None, str | None]] = []  # (tag, id, basis id)
        self.by_id: dict[str, list[str]] = {}
        self.regions: list[tuple[str, list[str]]] = []
        self.outside: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        values = dict(attrs)
        if tag in ("script", "style"):
            self.hidden += 1
        element_id, basis = values.get("id"), values.get("data-basis")
        if element_id:
            self.by_id.setdefault(element_id, [])
        if basis is not None:
            self.regions.append((basis, []))
        self.stack.append((tag, element_id, basis))

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while self.stack:
            open_tag = self.stack.pop()[0]
            if open_tag in ("script", "style"):
                self.hidden -= 1
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        for _, element_id, _ in self.stack:
            if element_id:
                self.by_id[element_id].append(data)
        inside = [basis for _, _, basis in self.stack if basis is not None]
        if inside:
            self.regions_open(inside[-1]).append(data)
        else:
            self.outside.append(data)

    def regions_open(self, basis: str) -> list[str]:
        for name, texts in reversed(self.regions):
            if name == basis:
                return texts
        raise AssertionError(basis)  # pragma: no cover - a region is opened before its text


def _plain(parts: list[str]) -> str:
    return re.sub(r"\s+", " ", " ".join(parts)).strip()


def earnings_basis_check(markup: str) -> EarningsCheck:
    """Every amount of money on a page must sit in an element marked ``data-basis="ID"``,
    and the element with that id must state the figure's period, final or preliminary,
    gross and net, the costs included (hosting, power, management) and that results are not
    guaranteed. Returns how many amounts were checked and what is missing."""
    parser = _Regions()
    parser.feed(markup)
    parser.close()
    findings: list[Finding] = []
    outside = _plain(parser.outside)
    for match in MONEY.finditer(outside):
        findings.append(
            Finding("earnings figure without basis", _excerpt(outside, match.start(), match.end()))
        )
    figures = 0
    for basis_id, texts in parser.regions:
        text = _plain(texts)
        amounts = len(MONEY.findall(text))
        figures += amounts
        if not amounts:
            continue
        if basis_id not in parser.by_id:
            findings.append(Finding("basis missing", f"no element with id {basis_id!r}"))
            continue
        basis = _plain(parser.by_id[basis_id])
        for need, pattern in BASIS_NEEDS:
            if not re.search(pattern, basis, re.IGNORECASE | re.DOTALL):
                findings.append(Finding(f"basis lacks {need}", basis[:120]))
    return EarningsCheck(figures=figures, findings=findings)

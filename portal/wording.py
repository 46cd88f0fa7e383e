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


# An earnings figure as the portal writes it: "1,234.56 EUR".
MONEY = re.compile(r"-?\d[\d,]*\.\d{2}\s[A-Z]{3}\b")
_EARNINGS = re.compile(
    r"<section\b[^>]*\bdata-earnings\b[^>]*>(.*?)</section\s*>", re.IGNORECASE | re.DOTALL
)
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
BASIS_PARTS: tuple[tuple[str, str], ...] = (
    ("period", rf"\b(?:(?:{_MONTHS})\s+\d{{4}}|\d{{4}}-\d{{2}}-\d{{2}})\b"),
    ("final or preliminary", r"\b(?:final|preliminary)\b"),
    ("gross", r"\bgross\b"),
    ("net", r"\bnet\b"),
    ("not guaranteed", r"\bnot\s+guaranteed\b"),
)


def earnings_without_basis(markup: str) -> list[Finding]:
    """Money figures with no basis beside them. A page keeps its earnings figures inside
    ``<section data-earnings>`` blocks, each stating the period, final or preliminary, gross
    and net, and that results are not guaranteed; a figure outside such a block, or a block
    missing a part, is a finding."""
    findings: list[Finding] = []
    for block in _EARNINGS.finditer(markup):
        text = visible_text(block.group(1))
        figure = MONEY.search(text)
        if figure is None:
            continue
        missing = [name for name, rule in BASIS_PARTS if not re.search(rule, text, re.I)]
        if missing:
            excerpt = _excerpt(text, figure.start(), figure.end())
            findings.append(Finding(f"earnings without {', '.join(missing)}", excerpt))
    outside = visible_text(_EARNINGS.sub(" ", markup))
    for figure in MONEY.finditer(outside):
        excerpt = _excerpt(outside, figure.start(), figure.end())
        findings.append(Finding("earnings outside a block with their basis", excerpt))
    return findings


def _denied(text: str, start: int) -> bool:
    return _DENIAL.search(text[max(0, start - 40) : start]) is not None


def _excerpt(text: str, start: int, end: int) -> str:
    return text[max(0, start - 30) : end + 30]

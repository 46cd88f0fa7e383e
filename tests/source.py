"""Reading the project's own source in tests: its string literals, f-strings included."""

from __future__ import annotations

import tokenize
from collections.abc import Iterator
from pathlib import Path


def string_literals(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each string literal in ``path``; an f-string's text without its
    replacement fields (Python 3.12 tokenizes those in parts)."""
    parts: list[str] = []
    start = 0
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type == tokenize.STRING:
                yield token.start[0], token.string
            elif token.type == tokenize.FSTRING_START:
                parts, start = [], token.start[0]
            elif token.type == tokenize.FSTRING_MIDDLE:
                parts.append(token.string)
            elif token.type == tokenize.FSTRING_END:
                yield start, " ".join(parts)

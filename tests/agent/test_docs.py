"""docs/agent.md is the server's contract: keep it in step with the code."""

import re
from pathlib import Path

from telemetry.agent.events import EVENT_KINDS
from telemetry.agent.windows import WindowBuilder
from telemetry.agent.xid import xid_table

DOC = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()


def test_xid_table_in_the_docs_is_the_code_s():
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| (\w+) \|$", DOC, flags=re.MULTILINE)
    assert [(int(c), n.strip(), s) for c, n, s in rows] == [
        (x.code, x.name, x.severity) for x in xid_table()
    ]


def test_every_window_field_and_event_kind_is_documented():
    documented = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)? \|", DOC, flags=re.MULTILINE))
    names = {n for pair in documented for n in pair if n}
    window = WindowBuilder("GPU-x", 0)
    window.look(0, 5)
    assert set(window.wire()) <= names
    assert set(EVENT_KINDS) <= names

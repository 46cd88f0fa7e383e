"""steward-verify on the published statements of the billing scenarios: each agrees with the
rules, line by line, to its content SHA-256; a statement tampered with in any field is caught,
and the verifier names the field."""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import time_machine

from billing.engine.document import document_from_frozen, sha256_hex
from tests.billing import reports_world as rw
from tests.billing import scenario as s
from tests.verify import world as w

pytestmark = pytest.mark.django_db


def assert_verifies(statement) -> dict[str, Any]:
    export = w.exported(statement)
    code, out = w.verified(export)
    assert code == 0, out
    lines = [line for line in export["lines"] if line["kind"] == "gpu"]
    for line in lines:
        assert f"line {line['position']} GPU " in out
    assert out.endswith("the content SHA-256 agree with the rules (docs/accounting.md).\n")
    return export


def test_worked_example_1_verifies(oscar, olga, disclosure):
    statements = w.worked_example_1(oscar, olga)
    assert len(statements) == 2
    for statement in statements:
        assert_verifies(statement)


def test_worked_example_2_verifies(oscar, olga, disclosure):
    statements = w.worked_example_2(oscar, olga)
    assert len(statements) == 2
    for statement in statements:
        assert_verifies(statement)


def test_the_hand_built_statement_verifies(oscar, olga, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    with time_machine.travel(w.MARCH[0], tick=False):
        statement = rw.statement_build(
            owner=owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
        )
    export = assert_verifies(statement)
    assert [line["kind"] for line in export["lines"]] == ["gpu", "adjustment"]


def test_a_gpu_that_changed_clusters_has_a_line_per_cluster(oscar, olga, disclosure):
    (alice,) = w.moved_clusters(oscar, olga)
    export = assert_verifies(alice)
    # Both lines cover the whole of Alice's run (the hashed content's bounds); each names
    # its cluster and the span the GPU was there in its terms.
    sn1 = sorted(
        (line for line in export["lines"] if line["description"] == "GPU SN-1"),
        key=lambda line: line["terms"]["span"],
    )
    assert {(line["starts_at"], line["ends_at"]) for line in sn1} == {
        ("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")
    }
    assert [t["cluster_name"] for t in (line["terms"] for line in sn1)] == ["A", "B"]
    assert [line["terms"]["span"] for line in sn1] == [
        ["2026-03-01T00:00:00Z", "2026-03-15T06:00:00Z"],
        ["2026-03-15T06:00:00Z", "2026-04-01T00:00:00Z"],
    ]
    # Each line holds its own cluster's seconds and is charged its own cluster's card.
    assert [line["in_service_s"] for line in sn1] == [1_231_200, 1_447_200]
    cards = [line["terms"]["rate_cards"] for line in sn1]
    assert [[c["hosting_fee_per_gpu_month"] for c in cs] for cs in cards] == [
        ["100.0000"],
        ["120.0000"],
    ]
    pools = [line["terms"]["pool"] for line in sn1]
    assert [p["gpu_weight"] for p in pools] == ["1231200", "1447200"]
    # Cluster A's 200.00 split by up seconds over SN-1's 1,231,200 and SN-2's 2,678,400:
    # 62.98 (62.976…, the larger remainder); cluster B's 50.00 is SN-1's alone.
    assert [p["gpu_part"] for p in pools] == ["62.98", "50.00"]
    # The report's days count each cluster's seconds once: all of March, in service and up.
    assert {d["in_service_s"] for d in export["days"]} == {2 * 86_400}


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, i))
    else:
        yield path, value


def _tampered(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except ArithmeticError:
            number = None
        if number is not None and number.is_finite():
            return str(number + Decimal("0.01"))
        if value[:4].isdigit() and value.endswith("Z"):
            later = dt.datetime.fromisoformat(value) + dt.timedelta(seconds=1)
            return later.isoformat().replace("+00:00", "Z")
        return value[:-1] + ("0" if value[-1] != "0" else "1")
    return "1"


def _set(export: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(export)
    target: Any = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


# The export's fields that the verifier checks: every figure and term of every line, the
# totals, the hash, the statement's header, and the inputs the figures are computed from.
CHECKED = ("lines", "totals", "statement", "basis", "adjustments", "payouts", "frozen_inputs")
# Informational, outside the hashed content and the figures: the statement's row id and
# timestamps, the owner's name as issued, the events and days the report lists (from the
# same cells), the explanatory basis text, and a line's cluster name (its id is checked).
UNCHECKED = {
    ("statement", "id"),
    ("statement", "status"),
    ("statement", "computed_at"),
    ("statement", "published_at"),
    ("statement", "owner_name"),
    ("frozen_inputs", "owner_name"),
    ("frozen_inputs", "opening_from_statement"),
}


def _checked(path: tuple[Any, ...]) -> bool:
    if path[0] not in CHECKED or path[:2] in UNCHECKED:
        return False
    if path[0] == "basis" and path[1] != "period":
        return False
    if path[0] == "frozen_inputs" and "events" in path:
        return False
    if path[0] == "lines" and path[2] in ("corrects_line_id", "kind"):
        return False
    return "cluster_name" not in path


def test_a_statement_tampered_with_in_any_field_is_caught_naming_it(oscar, olga, disclosure):
    statements = w.worked_example_1(oscar, olga)
    export = w.exported(statements[0])
    payout = {"reference": "PAY-1", "amount": "10.00", "paid_on": "2026-03-20"}
    export["payouts"] = [dict(payout)]
    export["frozen_inputs"]["payouts"] = [dict(payout)]
    # Recompute the hash the owner is told for the changed inputs: the base is a statement
    # that agrees with the rules, so every failure below is the tampering's.
    content = document_from_frozen(export["frozen_inputs"])
    export["statement"]["content_sha256"] = sha256_hex(content)
    export["totals"]["payouts_total"] = "10.00"
    export["totals"]["closing_balance"] = content["closing_balance"]
    assert w.verified(export)[0] == 0
    (held_until,) = {line["ends_at"] for line in export["lines"] if line["kind"] == "gpu"}
    assert held_until == "2026-03-10T12:00:30Z"  # Alice's statement
    tried = 0
    for path, value in _leaves(export):
        if not _checked(path):
            continue
        if path[0] == "frozen_inputs" and "cells" in path:
            if path[-1] not in (6, 7, 8, 9):
                continue  # a cell's bounds and flags: the figures cover what they decide
            cell = export["frozen_inputs"]["gpus"][path[2]]["cells"][path[4]]
            if cell[0] >= held_until:
                continue  # the buyer's time: only its up seconds reach this statement
        period = export["frozen_inputs"]["period"]
        instant = isinstance(value, str) and value[10:11] == "T" and value.endswith("Z")
        if path[:2] == ("frozen_inputs", "gpus") and instant and not period[0] <= value < period[1]:
            continue  # a bound outside the period: clipped to it, a second later or not
        changed = _tampered(value)
        if path[0] == "frozen_inputs" and "cells" in path and path[-1] == 8:
            # Busy time is kept in %·s: a second of busy time is 100 of them (a change below
            # a figure's six places changes nothing the statement shows).
            changed = str(Decimal(value) + 100)
        code, out = w.verified(_set(export, path, changed))
        # 1: a difference; 2: inputs the rules cannot compute (a bound cut inside a cell).
        assert code in (1, 2), (path, out)
        name = str(path[-1]) if not isinstance(path[-1], int) else str(path[-2])
        if path[0] != "frozen_inputs":
            assert name in out, (path, out)
        tried += 1
    assert tried == 142  # every field the statement and its frozen inputs hold


def test_frozen_inputs_tampered_are_named_through_the_term_they_feed(oscar, olga, disclosure):
    statements = w.worked_example_1(oscar, olga)
    export = w.exported(statements[0])
    rates = export["frozen_inputs"]["gpus"][0]["rates"][0]
    for field, term in (
        ("price_per_kwh", "price_per_kwh"),
        ("pue", "pue"),
        ("hosting_fee_per_gpu_month", "hosting_fee_per_gpu_month"),
        ("management_fee_pct", "management_fee_pct"),
    ):
        changed = copy.deepcopy(export)
        changed["frozen_inputs"]["gpus"][0]["rates"][0][field] = str(Decimal(rates[field]) + 1)
        code, out = w.verified(changed)
        assert code == 1
        assert f"terms.rate_cards[0].{term}" in out
        assert "content_sha256: DIFFERS" in out
    changed = copy.deepcopy(export)
    changed["frozen_inputs"]["gpus"][0]["rentals"][0][2] = "2.50"
    code, out = w.verified(changed)
    assert code == 1
    assert "terms.rentals[0].rate_per_gpu_hour" in out
    assert "content_sha256: DIFFERS" in out


def test_the_console_script_runs_without_django(tmp_path, oscar, olga, disclosure):
    statements = w.worked_example_1(oscar, olga)
    path = tmp_path / "statement.json"
    path.write_text(json.dumps(w.exported(statements[0])))
    script = Path(sys.executable).parent / "steward-verify"  # installed by `make install`
    done = subprocess.run(
        [str(script), str(path)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("content_sha256: ok\n")
    # Isolated (no environment, no working directory on the path): the standard library
    # and the verifier alone, nothing of the server's code.
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['steward-verify', sys.argv[1]]\n"
        "try:\n"
        "    runpy.run_module('steward_verify', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    loaded = {m.split('.')[0] for m in sys.modules}\n"
        "    assert not loaded & {'django', 'billing', 'rest_framework', 'config'}, loaded\n"
        "    raise\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stderr) == (0, "")
    tampered = w.exported(statements[0])
    gross = tampered["lines"][0]["gross"]
    tampered["lines"][0]["gross"] = "1000.00"
    path.write_text(json.dumps(tampered))
    done = subprocess.run([str(script), str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert f'    gross: statement says "1000.00", recomputed "{gross}"\n' in done.stdout
    assert done.stdout.endswith(
        "DIFFERENT: 1 of 5 checks differ from the rules (docs/accounting.md).\n"
    )


def test_a_pool_part_is_checked_against_the_cluster_s_amount_and_weights(oscar, olga, disclosure):
    """The close records the pool's amount and total weight (``PoolTerms`` in the frozen
    inputs), so the verifier checks the GPU's part is amount × weight ÷ total to the cent."""
    (alice,) = w.moved_clusters(oscar, olga)
    export = w.exported(alice)
    a_cluster = next(
        line["terms"]["cluster_id"]
        for line in export["lines"]
        if line["kind"] == "gpu" and line["terms"]["cluster_name"] == "A"
    )
    recorded = {
        (entry["pool_amount"], entry["pool_total_weight"])
        for entry in export["frozen_inputs"]["gpus"]
        if entry["cluster_id"] == a_cluster
    }
    assert recorded == {("200.00", "3909600")}
    code, out = w.verified(export)
    assert code == 0, out
    # SN-1: 200.00 × 1,231,200 ÷ 3,909,600 = 62.982…; SN-2: 137.017…, and the spare cent.
    parts = sorted(
        (line["description"], line["terms"]["pool"]["gpu_part"])
        for line in export["lines"]
        if line["kind"] == "gpu" and line["terms"]["cluster_id"] == a_cluster
    )
    assert parts == [("GPU SN-1", "62.98"), ("GPU SN-2", "137.02")]
    for entry in export["frozen_inputs"]["gpus"]:
        if entry["cluster_id"] == a_cluster:
            entry["pool_total_weight"] = "3000000"
    for line in export["lines"]:
        if line["kind"] == "gpu" and line["terms"]["cluster_id"] == a_cluster:
            line["terms"]["pool"]["total_weight"] = "3000000"
    code, out = w.verified(export)
    assert code == 1
    assert out.count("terms.pool.gpu_part: not the cluster's amount") == 2

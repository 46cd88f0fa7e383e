"""``steward-verify STATEMENT.json``: recompute a statement from its JSON export and compare.

Prints one line per statement line and per check, ``ok`` or each difference (the field, what
the statement says, what the rules give), then a verdict. Exits 0 only when everything agrees,
1 when anything differs, 2 when the file cannot be read or computed at all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TextIO

from steward_verify import __version__
from steward_verify.rules import RuleError, pool_part_fits, recompute

# A GPU line's figures in the export, compared with the recomputed content's line.
LINE_FIELDS = (
    "gpu_id",
    "starts_at",
    "ends_at",
    "share_bps",
    "in_service_s",
    "up_s",
    "down_s",
    "maintenance_s",
    "no_data_s",
    "availability",
    "utilization",
    "busy_gpu_hours",
    "energy_kwh",
    "gross",
    "hosting_fee",
    "power_cost",
    "management_fee",
    "net",
)
COSTS = ("hosting_fee", "power_cost", "management_fee")


def canonical_sha256(value: Any) -> str:
    """SHA-256 of canonical JSON: keys sorted, no whitespace, UTF-8 (docs/accounting.md)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return None


def same(said: Any, computed: Any) -> bool:
    """Equal as values: numbers by value ("1.50" is 1.5), everything else exactly."""
    a, b = _number(said), _number(computed)
    if a is not None and b is not None and a.is_finite() and b.is_finite():
        return a == b
    return bool(said == computed) and type(said) is type(computed)


def differences(path: str, said: Any, computed: Any) -> Iterator[str]:
    """Every leaf where the statement's value differs from the recomputed one."""
    if isinstance(computed, dict) and isinstance(said, dict):
        for key in sorted(set(said) | set(computed)):
            yield from differences(
                f"{path}.{key}" if path else key, said.get(key), computed.get(key)
            )
    elif isinstance(computed, list) and isinstance(said, list):
        if len(said) != len(computed):
            yield f"{path}: the statement lists {len(said)}, the rules give {len(computed)}"
        for i, (a, b) in enumerate(zip(said, computed, strict=False)):
            yield from differences(f"{path}[{i}]", a, b)
    elif not same(said, computed):
        yield f"{path}: statement says {_show(said)}, recomputed {_show(computed)}"


def _show(value: Any) -> str:
    return "nothing" if value is None else json.dumps(value, ensure_ascii=False)


class Checker:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.failed = 0
        self.checked = 0

    def say(self, text: str) -> None:
        self.out.write(text + "\n")

    def report(self, label: str, found: Sequence[str]) -> None:
        self.checked += 1
        if not found:
            self.say(f"{label}: ok")
            return
        self.failed += 1
        self.say(f"{label}: DIFFERS")
        for difference in found:
            self.say(f"    {difference}")


def verify(export: dict[str, Any], out: TextIO) -> int:
    frozen = export.get("frozen_inputs")
    if not isinstance(frozen, dict) or not isinstance(frozen.get("gpus"), list):
        print("frozen_inputs: missing; export the statement again (JSON)", file=out)
        return 2
    try:
        again = recompute(frozen)
    except (RuleError, KeyError, TypeError, ValueError, IndexError) as exc:
        print(f"frozen_inputs: cannot be computed by the rules: {exc!r}", file=out)
        return 2
    content = again.content
    check = Checker(out)
    statement = export.get("statement") or {}
    basis = export.get("basis") or {}
    disclosure = export.get("disclosure") or {}

    said_hash = statement.get("content_sha256")
    check.report(
        "content_sha256",
        [
            f"content_sha256: statement says {said_hash}, the recomputed content hashes to "
            f"{canonical_sha256(content)}"
        ]
        if said_hash != canonical_sha256(content)
        else [],
    )
    header = [
        *differences("statement.owner_id", statement.get("owner_id"), content["owner_id"]),
        *differences("statement.currency", statement.get("currency"), content["currency"]),
        *differences(
            "basis.period",
            basis.get("period"),
            {"start": content["period"][0], "end": content["period"][1]},
        ),
        *differences(
            "disclosure.version", disclosure.get("version"), content["disclosure"]["version"]
        ),
        *differences(
            "disclosure.text_sha256",
            disclosure.get("text_sha256"),
            content["disclosure"]["sha256"],
        ),
    ]
    text = disclosure.get("text")
    if text and hashlib.sha256(text.encode()).hexdigest() != disclosure.get("text_sha256"):
        header.append("disclosure.text: its SHA-256 is not disclosure.text_sha256")
    check.report("statement, period and disclosure", header)

    lines = export.get("lines") or []
    gpu = [line for line in lines if line.get("kind") == "gpu"]
    others = [line for line in lines if line.get("kind") != "gpu"]
    if len(gpu) != len(content["lines"]):
        check.report(
            "lines",
            [
                f"lines: the statement has {len(gpu)} GPU lines, the rules give "
                f"{len(content['lines'])}"
            ],
        )
    for position, line in enumerate(lines, start=1):
        if not same(line.get("position"), position):
            check.report("lines", [f"lines[{position - 1}].position: not {position}"])
    for line, computed, terms in zip(gpu, content["lines"], again.terms, strict=False):
        found = [
            d for name in LINE_FIELDS for d in differences(name, line.get(name), computed[name])
        ]
        found += differences("description", line.get("description"), f"GPU {computed['serial']}")
        said_terms = line.get("terms")
        if terms["cluster_name"] is None and isinstance(said_terms, dict):
            # Not frozen with this statement: the name shown is the cluster's name now.
            said_terms = {**said_terms, "cluster_name": None}
        found += differences("terms", said_terms, terms)
        fits = pool_part_fits(terms["pool"])
        if fits is False:
            found.append(
                "terms.pool.gpu_part: not the cluster's amount × this GPU's weight ÷ the "
                "total weight, to the cent"
            )
        cluster = terms["cluster_name"] or terms["cluster_id"]
        label = (
            f"line {line.get('position')} GPU {computed['serial']} in cluster {cluster} "
            f"{terms['span'][0]} to {terms['span'][1]}"
        )
        check.report(label, found)

    adjustments = content["adjustments"]
    if len(others) != len(adjustments):
        check.report(
            "adjustments",
            [f"adjustments: the statement has {len(others)} lines, its inputs {len(adjustments)}"],
        )
    for line, adjustment in zip(others, adjustments, strict=False):
        found = [
            *differences("kind", line.get("kind"), "adjustment"),
            *differences("net", line.get("net"), adjustment["amount"]),
            *differences("description", line.get("description"), adjustment["reason"][:300]),
        ]
        check.report(f"line {line.get('position')} adjustment", found)
    check.report(
        "adjustments and payouts as recorded",
        [
            *differences("adjustments", export.get("adjustments"), adjustments),
            *differences("payouts", export.get("payouts"), content["payouts"]),
        ],
    )

    totals = export.get("totals") or {}
    expected = {
        "gross": str(sum((Decimal(d["gross"]) for d in content["lines"]), Decimal("0.00"))),
        **{
            cost: str(sum((Decimal(d[cost]) for d in content["lines"]), Decimal("0.00")))
            for cost in COSTS
        },
        **{
            name: content[name]
            for name in (
                "opening_balance",
                "lines_total",
                "adjustments_total",
                "payouts_total",
                "closing_balance",
            )
        },
    }
    check.report("totals", list(differences("totals", totals, expected)))

    if check.failed:
        print(
            f"DIFFERENT: {check.failed} of {check.checked} checks differ from the rules "
            "(docs/accounting.md).",
            file=out,
        )
        return 1
    print(
        f"OK: all {len(gpu)} GPU lines, {len(others)} adjustments, the totals and the content "
        "SHA-256 agree with the rules (docs/accounting.md).",
        file=out,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="steward-verify",
        description="Recompute a Steward statement from its JSON export and check every "
        "line, total and the content SHA-256 (docs/accounting.md).",
    )
    parser.add_argument("statement", type=Path, help="the statement's JSON export")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = parser.parse_args(argv)
    try:
        export = json.loads(args.statement.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{args.statement}: cannot read a statement export: {exc}", file=sys.stdout)
        return 2
    if not isinstance(export, dict):
        print(f"{args.statement}: not a statement export", file=sys.stdout)
        return 2
    return verify(export, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())

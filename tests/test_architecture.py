"""Structure the import contracts in pyproject.toml cannot say (issue 21, item 10).

* No app imports another app's private modules (a path segment starting with ``_``, such as
  ``fleet.services._common``) or private names (``from x import _name``): what an app offers
  the others is public by name.
* An app's plain SQL reads its own tables. Where it reads another app's tables, that is
  listed below with why; anything new goes through the other app's selectors (for SQL, the
  fragments they export, such as ``fleet.selectors.touch_sql``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT
from tests.source import string_literals

APPS = ("accounts", "webhooks", "fleet", "telemetry", "billing", "portal", "api", "access")
CODE = ("core", *APPS)


def _modules() -> list[tuple[str, Path]]:
    return [
        (package, path)
        for package in CODE
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_no_app_imports_another_apps_private_modules_or_names():
    offenders = []
    for package, path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [alias.name for alias in node.names]
                target = node.module
            elif isinstance(node, ast.Import):
                names, target = [], ""
                for alias in node.names:
                    target = alias.name
            else:
                continue
            other = target.split(".")[0]
            if other == package or other not in CODE:
                continue
            private = [s for s in target.split(".") if s.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            if private:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {target} {private}")
    assert offenders == []


# Plain SQL in one app that reads another app's tables, and why it may. Nothing may be added
# here without the same kind of reason: a read the other app's selectors cannot serve without
# an extra round trip per row.
SQL_ACROSS_APPS = {
    # Billing reads telemetry's rollups and windows in the statements' one read path,
    # joined with its own facts (docs/accounting.md: what a statement is computed from).
    ("billing/selectors/usage.py", "telemetry_dailyrollup"),
    ("billing/selectors/usage.py", "telemetry_hourlyrollup"),
    ("billing/selectors/usage.py", "telemetry_window"),
    # Telemetry attributes windows and events to the GPU placed in the node's slot then, in
    # the same statement that stores them (docs/telemetry.md).
    ("telemetry/selectors.py", "fleet_placement"),
    ("telemetry/services/upkeep.py", "fleet_placement"),
    ("telemetry/services/processing/validation.py", "fleet_placement"),
    ("telemetry/services/processing/validation.py", "fleet_gpu"),
    ("telemetry/services/state_events.py", "fleet_ownership"),
    ("telemetry/services/state_events.py", "fleet_gpu"),
    ("telemetry/services/incidents.py", "fleet_incident"),
    ("telemetry/services/incidents.py", "fleet_incidentdraft"),
    # The owner's GPU health page: a GPU's windows and its node, for one GPU at a time.
    ("portal/health.py", "telemetry_window"),
    ("portal/health.py", "fleet_node"),
    # The API's availability series read rollups in one statement per page.
    ("api/selectors.py", "telemetry_hourlyrollup"),
    # A partner grant's owner, in the webhook outbox's fan-out.
    ("webhooks/services.py", "accounts_partnergrant"),
    # Membership is how a user reads for owner accounts (access.visibility.Accounts).
    ("access/visibility.py", "accounts_membership"),
    ("portal/access.py", "accounts_membership"),
    ("portal/access.py", "accounts_user"),
}
_TABLE = re.compile(r"\b(accounts|webhooks|fleet|telemetry|billing|portal)_([a-z]+)\b")
_SQL = re.compile(r"\b(SELECT|JOIN|FROM|UPDATE|INSERT|DELETE)\b")


def test_plain_sql_reads_another_apps_tables_only_where_listed():
    found = set()
    for package, path in _modules():
        for _, text in string_literals(path):
            if _SQL.search(text):
                for match in _TABLE.finditer(text):
                    if match.group(1) != package:
                        found.add((str(path.relative_to(ROOT)), match.group(0)))
    assert found - SQL_ACROSS_APPS == set(), "read through the other app's selectors"
    assert SQL_ACROSS_APPS - found == set(), "no longer read there: drop it from the list"


def test_production_code_checks_invariants_with_errors_not_asserts():
    """An ``assert`` vanishes under ``python -O`` and fails without saying what broke; an
    invariant raises an error that names it. Test helpers (``testing.py``) may assert."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for _, path in _modules()
        if path.name != "testing.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert found == []


def test_instants_are_written_by_core_instants_only():
    """The UTC instant was formatted by hand about a dozen times; now only core/instants.py
    does (the statement verifier keeps its own copy: it imports nothing of the server)."""
    by_hand = re.compile(r'replace\("\+00:00", "Z"\)|%H:%M(:%S)? UTC')
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for _, path in _modules()
        if path != ROOT / "core" / "instants.py" and path.name != "testing.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert found == []

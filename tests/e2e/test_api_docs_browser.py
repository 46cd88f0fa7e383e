"""Swagger UI and Redoc render the partner API under the site's Content Security Policy:
every operation shows, no CSP violation, no failed request, no script error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Recorded before any page script runs, so violations during start-up count too.
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def _operations() -> int:
    """Every operation (path × method) of the committed schema, which the contract test
    keeps equal to the generated one."""
    schema = (Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml").read_text()
    methods = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
    return sum(
        1 for line in schema.splitlines() if line.rstrip(":") in {f"    {m}" for m in methods}
    )


OPERATIONS = _operations()


# Redoc's side menu shows Redocly's logo from their CDN (hard-coded in the bundle): the policy
# refuses it, the menu then leaves it out. Exactly that, nothing else, may be refused.
REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def _open(page: Any, path: str, selector: str, refused: tuple[str, ...] = ()) -> None:
    page.add_init_script(LISTEN)
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(f"{r.method} {r.url} {r.failure}"))
    page.goto(path)
    page.wait_for_selector(selector, timeout=20_000)
    page.wait_for_function(f"document.querySelectorAll({selector!r}).length >= {OPERATIONS}")
    page.wait_for_load_state("networkidle")
    assert page.locator(selector).count() == OPERATIONS
    violations = page.evaluate("window.__csp")
    assert violations == [f"img-src {url} :0" for url in refused], "\n".join(violations)
    failed = [f for f in failed if not any(f.startswith(f"GET {url} ") for url in refused)]
    assert failed == [], "\n".join(failed)
    problems = [p for p in page.problems if not any(url in p for url in refused)]
    assert problems == [], "\n".join(problems)


def test_swagger_ui_renders_every_operation_under_the_csp(page, screenshot):
    _open(page, "/api/v1/docs", ".opblock")
    assert page.locator(".opblock-summary-path").first.inner_text().startswith("/api/v1/")
    screenshot(page, "api-swagger-ui")


def test_redoc_renders_every_operation_under_the_csp(page, screenshot):
    _open(page, "/api/v1/redoc", "[data-section-id^='operation/']", refused=(REDOCLY_LOGO,))
    assert page.get_by_text("Steward partner API").first.is_visible()
    screenshot(page, "api-redoc")

"""Statement reports: one data structure (``statement_report``), three renderings."""

from billing.reports.pdf import render_pdf
from billing.reports.render import render_csv, render_json
from billing.reports.report import Report, line_terms, statement_report

__all__ = ["Report", "line_terms", "render_csv", "render_json", "render_pdf", "statement_report"]

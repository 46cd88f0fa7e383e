"""A statement report as CSV and as JSON: the same data as the PDF, raw values.

Values are raw for programs and spreadsheets: ISO 8601 instants with ``Z``, decimals as their
exact text (money with cents, ratios 0–1 to six places), seconds as integers. A CSV text cell
starting with ``= + - @`` is prefixed with ``'`` so spreadsheets do not run it. The basis and
the disclosure come first in both, so no figure travels without them.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from billing.reports.report import LINE_FIELDS, Day, Event, Report
from core.instants import iso_z

DAY_FIELDS = (
    "day",
    "in_service_s",
    "up_s",
    "down_s",
    "maintenance_s",
    "no_data_s",
    "availability",
    "utilization",
)
EVENT_FIELDS = ("kind", "id", "title", "cause", "starts_at", "ends_at", "gpus")
PAYOUT_FIELDS = ("reference", "paid_on", "amount")


def raw(value: Any) -> Any:
    """JSON-ready: instants in UTC with Z, decimals as text, tuples as lists."""
    if isinstance(value, datetime):
        return iso_z(value)
    if isinstance(value, (Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [raw(v) for v in value]
    if isinstance(value, dict):
        return {k: raw(v) for k, v in value.items()}
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    text = str(raw(value))
    # A spreadsheet would run a text cell starting with one of these as a formula.
    if isinstance(value, str) and text[:1] in ("=", "+", "-", "@"):
        return "'" + text
    return text


TERMS_FIELDS = (
    "position",
    "cluster_id",
    "cluster_name",
    "span_start",
    "span_end",
    "up_s",
    "share_bps",
    "share_from",
    "share_to",
    "pool_basis",
    "pool_cluster_amount",
    "pool_gpu_weight",
    "pool_total_weight",
    "pool_gpu_part",
    "pool_run_weight",
    "gpu_rentals",
    "gpu_total",
    "run_exact",
    "share_exact",
)
RENTAL_FIELDS = ("position", "from", "to", "rate_per_gpu_hour", "up_s", "amount")
RATE_CARD_FIELDS = (
    "position",
    "from",
    "to",
    "hosting_fee_per_gpu_month",
    "in_service_s",
    "waives_operator_incidents",
    "waived_incident_s",
    "waives_down",
    "waived_down_s",
    "period_s",
    "energy_kwh",
    "pue",
    "price_per_kwh",
    "management_fee_pct",
)


def _terms_sections(report: Report) -> list[tuple[str, tuple[str, ...], list[dict[str, Any]]]]:
    """Each GPU line's terms, flat: one row per line, per rental and per rate card in force
    (``position`` ties them to the line)."""
    lines: list[dict[str, Any]] = []
    rentals: list[dict[str, Any]] = []
    cards: list[dict[str, Any]] = []
    for line, terms in zip(report.lines, report.terms, strict=True):
        if terms is None:
            continue
        position = line["position"]
        pool, revenue, share = terms["pool"], terms["revenue"], terms["share"]
        lines.append(
            {
                "position": position,
                "cluster_id": terms["cluster_id"],
                "cluster_name": terms["cluster_name"],
                "span_start": terms["span"][0],
                "span_end": terms["span"][1],
                "up_s": terms["up_s"],
                "share_bps": share["bps"],
                "share_from": share["from"],
                "share_to": share["to"],
                "pool_basis": pool["basis"],
                "pool_cluster_amount": pool["cluster_amount"],
                "pool_gpu_weight": pool["gpu_weight"],
                "pool_total_weight": pool["total_weight"],
                "pool_gpu_part": pool["gpu_part"],
                "pool_run_weight": pool["run_weight"],
                "gpu_rentals": revenue["gpu_rentals"],
                "gpu_total": revenue["gpu_total"],
                "run_exact": revenue["run_exact"],
                "share_exact": revenue["share_exact"],
            }
        )
        rentals += [{"position": position, **r} for r in terms["rentals"]]
        cards += [
            {
                "position": position,
                **c,
                # As JSON writes it (a spreadsheet reads either).
                "waives_operator_incidents": "true" if c["waives_operator_incidents"] else "false",
                "waives_down": "true" if c["waives_down"] else "false",
            }
            for c in terms["rate_cards"]
        ]
    return [
        ("terms", TERMS_FIELDS, lines),
        ("rentals", RENTAL_FIELDS, rentals),
        ("rate_cards", RATE_CARD_FIELDS, cards),
    ]


def _day(day: Day) -> dict[str, Any]:
    return {name: raw(getattr(day, name)) for name in DAY_FIELDS}


def _event(event: Event) -> dict[str, Any]:
    return {name: raw(getattr(event, name)) for name in EVENT_FIELDS}


def report_document(report: Report) -> dict[str, Any]:
    """The report as plain data: what ``render_json`` writes."""
    b = report.basis
    return {
        "statement": {
            "id": report.statement_id,
            "owner_id": report.owner_id,
            "owner_name": report.owner_name,
            "currency": report.currency,
            "status": report.status,
            "computed_at": raw(report.computed_at),
            "published_at": raw(report.published_at),
            "content_sha256": report.content_sha256,
        },
        "basis": {
            "period": {"start": raw(b.period_start), "end": raw(b.period_end)},
            "finality": b.finality,
            "gross": b.gross,
            "net": b.net,
            "costs_included": list(b.costs_included),
            "time_zone": b.time_zone,
            "not_guaranteed": b.not_guaranteed,
        },
        "disclosure": {
            "version": report.disclosure.version,
            "text_sha256": report.disclosure.sha256,
            "text": report.disclosure.text,
        },
        "totals": {
            "gross": raw(report.gross_total),
            **{name: raw(value) for name, value in report.costs_total.items()},
            "opening_balance": raw(report.opening_balance),
            "lines_total": raw(report.lines_total),
            "adjustments_total": raw(report.adjustments_total),
            "payouts_total": raw(report.payouts_total),
            "closing_balance": raw(report.closing_balance),
        },
        "lines": [
            {**{name: raw(line[name]) for name in LINE_FIELDS}, "terms": terms}
            for line, terms in zip(report.lines, report.terms, strict=True)
        ],
        # Everything the figures were computed from: what ``steward-verify`` recomputes the
        # lines, the totals and the content's SHA-256 from (docs/accounting.md).
        "frozen_inputs": report.frozen_inputs,
        "adjustments": [raw(a) for a in report.adjustments],
        "payouts": [raw(p) for p in report.payouts],
        "events": None if report.events is None else [_event(e) for e in report.events],
        "days": None if report.days is None else [_day(d) for d in report.days],
    }


def render_json(report: Report) -> bytes:
    """Sorted keys, two-space indent, UTF-8, a final newline: the same bytes every time."""
    text = json.dumps(report_document(report), sort_keys=True, indent=2, ensure_ascii=False)
    return (text + "\n").encode()


def render_csv(report: Report) -> str:
    """The basis and disclosure (13 rows), the lines, then maintenance and incidents, the
    days and the payouts as sections, and the totals last (the balance on the last row)."""
    b = report.basis
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\r\n")
    for name, value in (
        ("statement", report.statement_id),
        ("owner_id", report.owner_id),
        ("currency", report.currency),
        ("period_start", b.period_start),
        ("period_end", b.period_end),
        ("finality", b.finality),
        ("gross", b.gross),
        ("net", b.net),
        ("costs_included", " ".join(b.costs_included)),
        ("disclosure_version", report.disclosure.version),
        ("disclosure_sha256", report.disclosure.sha256),
        ("not_guaranteed", b.not_guaranteed),
        ("content_sha256", report.content_sha256),
    ):
        w.writerow([name, _cell(value)])
    w.writerow([])
    w.writerow(LINE_FIELDS)
    for line in report.lines:
        w.writerow([_cell(line[name]) for name in LINE_FIELDS])
    sections: list[tuple[str, tuple[str, ...], list[dict[str, Any]]]] = []
    if any(t is not None for t in report.terms):
        sections += _terms_sections(report)
    sections.append(("payouts", PAYOUT_FIELDS, [dict(p) for p in report.payouts]))
    if report.events is not None:
        sections.append(("events", EVENT_FIELDS, [_event(e) for e in report.events]))
    if report.days is not None:
        sections.append(("days", DAY_FIELDS, [_day(d) for d in report.days]))
    for name, fields, rows in sections:
        w.writerow([])
        w.writerow(["section", name])
        w.writerow(fields)
        for row in rows:
            w.writerow([_cell(row[f]) for f in fields])
    w.writerow([])
    w.writerow(["gross_total", _cell(report.gross_total)])
    for cost, total in report.costs_total.items():
        w.writerow([f"{cost}_total", _cell(total)])
    for name in ("opening_balance", "lines_total", "adjustments_total", "payouts_total"):
        w.writerow([name, _cell(getattr(report, name))])
    w.writerow(["closing_balance", _cell(report.closing_balance)])
    return out.getvalue()

"""A statement built by hand: frozen inputs written out in full, so every figure of its
report is known. It goes through the real writer and the real four-eyes publishing.

Period 2026-02-01 → 2026-02-04 (three days). One GPU, wholly the owner's, rented at
2.00 per GPU-hour over the whole period:

* 1 Feb: up all day at 50 % utilization;
* 2 Feb: planned maintenance until 06:00 ("Cooling service"), then up at 25 %;
* 3 Feb: up 12 hours at 100 %, then the agent is silent (no data).

Opening balance 50.00, an adjustment of −5.00, a payout of 20.00 on 2 Feb.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from accounts.models import Owner, User
from billing.engine.document import document_from_frozen, sha256_hex
from billing.models import Period, Statement
from billing.services.closing import statements_write
from billing.services.computing import Draft
from billing.services.publishing import statement_publish_approve, statement_publish_request
from fleet.models import Gpu

UTC = dt.UTC
START = dt.datetime(2026, 2, 1, tzinfo=UTC)
END = dt.datetime(2026, 2, 4, tzinfo=UTC)


def _z(at: dt.datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _h(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2026, 2, day, hour, tzinfo=UTC)


def frozen_inputs(owner: Owner, gpu: Gpu, disclosure: Any) -> dict[str, Any]:
    def cell(
        a: dt.datetime, b: dt.datetime, *, up: int, busy: str, kwh: str, maintenance: bool = False
    ) -> list[Any]:
        return [_z(a), _z(b), 1, int(maintenance), 0, 0, up, 0, busy, kwh, []]

    return {
        "owner_id": str(owner.pk),
        "owner_name": owner.legal_name,
        "currency": "EUR",
        "period": [_z(START), _z(END)],
        "disclosure": {"version": disclosure.version, "sha256": disclosure.text_sha256},
        "opening_balance": "50.00",
        "opening_from_statement": None,
        "adjustments": [
            {
                "id": 1,
                "amount": "-5.00",
                "reason": "=Correction of January",
                "source": "manual",
                "corrects_statement": None,
                "corrects_line": None,
            }
        ],
        "payouts": [{"reference": "PAY-1", "amount": "20.00", "paid_on": "2026-02-02"}],
        "gpus": [
            {
                "gpu_id": str(gpu.pk),
                "serial": gpu.serial,
                "cluster_id": "00000000-0000-0000-0000-000000000001",
                "pool_basis": "up_seconds",
                "pool_cents": "0.00",
                "rates": [
                    {
                        "from": _z(START),
                        "to": _z(END),
                        "hosting_fee_per_gpu_month": "30.0000",
                        "price_per_kwh": "0.200000",
                        "pue": "1.300",
                        "management_fee_pct": "10.00",
                        "waive_hosting_in_operator_incidents": False,
                    }
                ],
                "ownership": [[_z(START), _z(END), {str(owner.pk): 10_000}]],
                "rentals": [[_z(START), _z(END), "2.000000"]],
                "cells": [
                    cell(_h(1), _h(2), up=86_400, busy="4320000", kwh="15.600000"),
                    cell(_h(2), _h(2, 6), up=0, busy="0", kwh="3.000000", maintenance=True),
                    cell(_h(2, 6), _h(3), up=64_800, busy="1620000", kwh="10.800000"),
                    cell(_h(3), _h(4), up=43_200, busy="4320000", kwh="7.200000"),
                ],
                "events": [
                    [
                        "maintenance",
                        7,
                        "Cooling service",
                        "",
                        _z(_h(2)),
                        _z(_h(2, 6)),
                    ]
                ],
            }
        ],
    }


def statement_build(
    *,
    owner: Owner,
    gpu: Gpu,
    disclosure: Any,
    publish_by: tuple[User, User] | None = None,
    at: dt.datetime = END,
) -> Statement:
    """Writes the statement (a draft computed at ``at``); publishes it with the two
    operators given. The period is created, or reused, and left closing."""
    period, _ = Period.objects.get_or_create(start=START, end=END)
    Period.objects.filter(pk=period.pk).update(status=Period.Status.CLOSING, closing_started_at=at)
    period.refresh_from_db()
    frozen = frozen_inputs(owner, gpu, disclosure)
    content = document_from_frozen(frozen)
    draft = Draft(
        owner_id=str(owner.pk),
        currency="EUR",
        frozen_json=json.dumps(frozen),
        content=content,
        sha256=sha256_hex(content),
    )
    statements_write(period=period, drafts={(str(owner.pk), "EUR"): draft})
    statement = Statement.objects.get(owner=owner, period=period, currency="EUR")
    if publish_by is not None:
        requester, approver = publish_by
        statement = statement_publish_request(statement=statement, by=requester)
        statement = statement_publish_approve(statement=statement, by=approver)
    return statement

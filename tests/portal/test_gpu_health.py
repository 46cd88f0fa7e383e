"""A GPU's health on its page, from telemetry that went through the real ingest path: its
state now and when it was last seen, the driver, XID and ECC history, remapped-row changes;
a GPU without any telemetry says so; and what a user sees is cut to when they held it."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
import time_machine
from django.test import Client

from fleet.services import ownership
from portal.health import ErrorDay, HealthEvent, RemapChange, gpu_health
from telemetry.services.derived import derived_drain
from telemetry.services.processing import batches_process
from telemetry.testing import BATCHES_PATH, batch_document, event, fleet_node, signed_batch, window

pytestmark = pytest.mark.django_db

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 21, 12, 0, 30, tzinfo=UTC)
T0 = dt.datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
SALE = T0 + dt.timedelta(minutes=30)  # alice sells the GPU to bob at 09:30


def at(minutes: int, seconds: int = 0) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes, seconds=seconds)


def counters(minute: int) -> dict[str, Any]:
    """ECC errors and remapped rows as the driver counts them, rising during the morning."""
    return {
        "ecc_corrected": 0 if minute < 20 else 5 if minute < 40 else 12,
        "ecc_uncorrected": 0 if minute < 40 else 1,
        "remapped_rows_correctable": 0 if minute < 20 else 2,
        "remapped_rows_uncorrectable": 0 if minute < 40 else 1,
        "remapped_rows_pending": minute >= 40,
    }


@pytest.fixture
def fleet(oscar, alice_owner, bob_owner, alice, bob) -> Any:
    """Two GPUs on one node, alice's since Nov 1; the first reports 09:00–12:00 (down after
    an XID 79 at 09:45 until 09:50), the second never reports anything."""
    with time_machine.travel(NOW, tick=False):
        node = fleet_node(gpus=2, placed_from=NOW - dt.timedelta(days=30))
        reporting, silent = node.gpus
        ownership.ownership_sell(
            gpus=[reporting, silent],
            owner=alice_owner,
            share_bps=10_000,
            at=dt.datetime(2026, 11, 1, tzinfo=UTC),
            reason="order",
            by=oscar,
        )
        windows = [
            window(
                reporting.nvml_uuid,
                at(m),
                **counters(m),
                **(
                    {"state": "down", "state_reason": "xid:79", "util_gpu": None}
                    if 45 <= m < 50
                    else {}
                ),
            )
            for m in range(180)
        ]
        events = [
            event("xid", at(10, 5), gpu_uuid=reporting.nvml_uuid, xid=13),
            event("xid", at(45, 2), gpu_uuid=reporting.nvml_uuid, xid=79),
        ]
        body, headers = signed_batch(
            node, batch_document(node=node, windows=windows, events=events)
        )
        content_type = headers.pop("Content-Type")
        response = Client().post(
            BATCHES_PATH, data=body, content_type=content_type, headers=headers
        )
        assert response.status_code == 202, response.content
        batches_process(worker="test")
        derived_drain(limit=1000)
    return reporting, silent


@pytest.fixture
def now() -> Any:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def health(user, gpu):
    return gpu_health(user=user, gpu=gpu, start=NOW - dt.timedelta(days=30), end=NOW, now=NOW)


def text(response) -> str:
    assert response.status_code == 200
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_the_health_of_a_reporting_gpu(fleet, alice, now):
    reporting, _ = fleet
    found = health(alice, reporting)
    assert found.driver_version == "570.86.15"
    assert found.agent_version == "0.1.0-test"
    reading = found.reading
    assert (reading.at, reading.ecc_corrected, reading.ecc_uncorrected) == (at(180), 12, 1)
    assert (
        reading.remapped_correctable,
        reading.remapped_uncorrectable,
        reading.remapped_pending,
    ) == (2, 1, True)
    assert found.events == [
        HealthEvent(
            at(45, 2),
            "xid",
            "XID 79: GPU has fallen off the bus",
            "down",
            "GPU stopped: cannot run work until reset",
        ),
        HealthEvent(
            at(10, 5),
            "xid",
            "XID 13: Graphics engine exception",
            "app",
            "the application failed; the GPU is fine",
        ),
    ]
    assert found.events_total == 2
    # ECC increases by day: 12 corrected, 1 uncorrected; and the 2 XIDs.
    assert found.error_days == [ErrorDay(dt.datetime(2026, 11, 21, tzinfo=UTC), 2, 12, 1)]
    assert found.remaps == [
        RemapChange(at(41), 2, 1, True, (2, 0, False)),
        RemapChange(at(21), 2, 0, False, (0, 0, False)),
        RemapChange(at(1), 0, 0, False, None),
    ]
    assert found.findings == [
        "A memory row remap is pending: it takes effect at the GPU's next reset.",
        "1 memory row(s) remapped after uncorrectable errors.",
        "1 uncorrectable ECC error(s) in the last 30 days.",
        "1 event(s) that stopped the GPU (of the 50 newest).",
    ]


def test_the_gpu_page_shows_state_now_and_the_history(client, fleet, alice, now):
    reporting, _ = fleet
    client.force_login(alice)
    page = text(client.get(f"/gpus/{reporting.pk}/"))
    assert "Health Up since 2026-11-21 09:50:00 UTC · last seen 2026-11-21 12:00:00 UTC" in page
    assert "Driver version 570.86.15" in page
    assert "ECC errors, corrected (driver counter) 12" in page
    assert "Row remap pending yes: takes effect at the next reset" in page
    assert (
        "2026-11-21 09:45:02 UTC XID 79: GPU has fallen off the bus down "
        "GPU stopped: cannot run work until reset" in page
    )
    assert "Sat 21 Nov 2026 2 12 1" in page
    assert "2026-11-21 09:41:00 UTC 2 → 2 0 → 1 yes" in page
    assert "No telemetry yet" not in page
    html = client.get(f"/gpus/{reporting.pk}/").content.decode()
    assert 'id="timeline-title"' in html and 'id="chart-util-title"' in html
    events_csv = client.get(f"/gpus/{reporting.pk}/", {"export": "events"})
    rows = b"".join(events_csv.streaming_content).decode().splitlines()
    assert rows[0] == "when,event,severity,what_it_means"
    assert rows[1] == (
        "2026-11-21T09:45:02Z,XID 79: GPU has fallen off the bus,down,"
        "GPU stopped: cannot run work until reset"
    )


def test_a_gpu_without_telemetry_says_so(client, fleet, alice, now):
    _, silent = fleet
    assert health(alice, silent).reading is None
    assert health(alice, silent).events == []
    client.force_login(alice)
    response = client.get(f"/gpus/{silent.pk}/")
    page = text(response)
    assert "No telemetry yet." in page
    assert "no telemetry has been received for this GPU" in page
    # No strip of no-data hours, no empty 0–1 W charts.
    html = response.content.decode()
    assert "<svg" not in html
    assert "Driver version 570.86.15" in page  # its node reports one


def test_what_a_user_sees_is_cut_to_when_they_held_it(client, fleet, oscar, alice_owner, bob_owner,
                                                      alice, bob, now):  # fmt: skip
    reporting, _ = fleet
    ownership.ownership_transfer(
        gpus=[reporting],
        from_owner=alice_owner,
        to=[ownership.ShareTo(bob_owner, 10_000)],
        at=SALE,
        reason="alice sold it to bob",
        by=oscar,
    )
    alices = health(alice, reporting)
    assert [e.label for e in alices.events] == ["XID 13: Graphics engine exception"]
    assert [r.at for r in alices.remaps] == [at(21), at(1)]
    assert alices.reading.at == at(30)  # her last minute: 09:29
    day = dt.datetime(2026, 11, 21, tzinfo=UTC)
    assert alices.error_days == [ErrorDay(day, 1, 5, 0)]
    bobs = health(bob, reporting)
    assert [e.label for e in bobs.events] == ["XID 79: GPU has fallen off the bus"]
    assert [r.at for r in bobs.remaps] == [at(41), at(31)]
    # His increases count from the reading before his first minute: 12 - 5 and 1 - 0.
    assert bobs.error_days == [ErrorDay(day, 1, 7, 1)]
    client.force_login(bob)
    assert client.get(f"/gpus/{fleet[1].pk}/").status_code == 404  # never his

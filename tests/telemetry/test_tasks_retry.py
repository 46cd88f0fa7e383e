"""The batch and derived tasks retry when their database session is lost, whatever class
the error comes out as (their statements run on psycopg cursors)."""

from __future__ import annotations

import psycopg
import pytest

from telemetry import tasks
from telemetry.services import derived, processing
from telemetry.services.derived import DerivedResult
from telemetry.services.processing import ProcessResult


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.IdleInTransactionSessionTimeout("terminating connection due to timeout"),
    ],
    ids=["gone", "idle-timeout"],
)
@pytest.mark.parametrize("task", ["batches", "derived"])
def test_a_task_whose_session_is_lost_is_retried(monkeypatch, error, task):
    """Run in this process (``apply``), where Celery runs a retry at once."""
    calls: list[int] = []

    def lost_once(**_: object) -> ProcessResult | DerivedResult:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return ProcessResult() if task == "batches" else DerivedResult()

    if task == "batches":
        monkeypatch.setattr(processing, "batches_process", lost_once)
        result = tasks.batches_process.apply()
    else:
        monkeypatch.setattr(derived, "derived_process", lost_once)
        result = tasks.derived_process.apply()
    assert result.get() == 0  # the retry ran and finished
    assert len(calls) == 2

"""JSON log lines (one object per line) and the request-id context they carry."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

# One request id for logs and the audit trail; it lives in accounts because apps may not
# import the project package.
from accounts.context import request_id_var

__all__ = ["JsonFormatter", "RequestIdFilter", "StdoutHandler", "request_id_var", "task_var"]

# The Celery task being run, as (name, id), set by config.celery around each task: every line
# logged inside it, by the task or by the services it calls, names it.
task_var: ContextVar[tuple[str, str] | None] = ContextVar("steward_task", default=None)

# Attributes every LogRecord has; anything else was passed through ``extra=``.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "request_id"}


class RequestIdFilter(logging.Filter):
    """Puts the request id on every record, and inside a Celery task its name and id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        task = task_var.get()
        if task is not None and not hasattr(record, "task_id"):
            record.task, record.task_id = task
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", request_id_var.get()),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stdout`` is when the record is emitted.

    A handler bound to the stream at configuration time keeps writing to it after a test
    runner or daemoniser has swapped and closed it (atexit hooks log late). But never to a
    stdout that is itself a logger: Celery can replace ``sys.stdout`` with a proxy that logs
    what is written, and a record written there is lost (or logged again, in a loop).
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = _stdout()
        super().emit(record)


def _stdout() -> TextIO:
    stream = sys.stdout
    if type(stream).__name__ == "LoggingProxy" and sys.__stdout__ is not None:
        return sys.__stdout__  # celery.utils.log.LoggingProxy: the process's real stdout
    return stream

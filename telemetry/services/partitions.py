"""Daily partitions of ``telemetry_window``: created ahead, created on demand, dropped by age."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from typing import Any

import psycopg
from django.db import connection

PARENT = "telemetry_window"
_NAME = re.compile(r"^telemetry_window_p(\d{8})$")


def partition_name(day: dt.date) -> str:
    return f"{PARENT}_p{day:%Y%m%d}"


def window_partitions(*, cursor: Any | None = None) -> list[dt.date]:
    query = (
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass"
    )
    if cursor is None:
        with connection.cursor() as own:
            own.execute(query, [PARENT])
            names = [row[0] for row in own.fetchall()]
    else:
        cursor.execute(query, [PARENT])
        names = [row[0] for row in cursor.fetchall()]
    return sorted(
        dt.datetime.strptime(m.group(1), "%Y%m%d").replace(tzinfo=dt.UTC).date()
        for name in names
        if (m := _NAME.match(name))
    )


def window_partitions_ensure(
    *, days: Iterable[dt.date], cursor: Any | None = None, ddl: Any | None = None
) -> list[dt.date]:
    """Creates the missing daily partitions for ``days``; returns those it created.

    One catalog query per call (per worker chunk): cheaper than being wrong about a cache.
    ``cursor`` reads the catalog; ``ddl`` (a connection in autocommit) creates what is
    missing, so that a worker's chunk transaction never holds the parent table's exclusive
    lock. Both default to Django's connection.
    """
    wanted = set(days)
    if not wanted:
        return []
    wanted -= set(window_partitions(cursor=cursor))
    created = []
    for day in sorted(wanted):
        start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        # IF NOT EXISTS: another worker may create the same day at the same moment.
        sql = (
            f'CREATE TABLE IF NOT EXISTS "{partition_name(day)}" PARTITION OF {PARENT} '
            "FOR VALUES FROM (%s) TO (%s)"
        )
        if ddl is not None:  # DDL takes no bound parameters: quoted on the client
            psycopg.ClientCursor(ddl).execute(sql, [start, start + dt.timedelta(days=1)])
        else:
            with connection.cursor() as own:
                own.execute(sql, [start, start + dt.timedelta(days=1)])
        created.append(day)
    return created


def window_partitions_ahead(*, today: dt.date, days_ahead: int) -> list[dt.date]:
    return window_partitions_ensure(
        days=[today + dt.timedelta(days=n) for n in range(days_ahead + 1)]
    )


def window_partitions_drop_before(*, day: dt.date) -> list[dt.date]:
    """Drops every daily partition wholly before ``day`` (raw retention; rollups stay)."""
    dropped = []
    for existing in window_partitions():
        if existing < day:
            with connection.cursor() as cursor:
                cursor.execute(f'DROP TABLE IF EXISTS "{partition_name(existing)}"')
            dropped.append(existing)
    return dropped

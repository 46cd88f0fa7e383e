"""What every bench shares: its own database, the load average, processes, and goals.

* ``database_setup``: a database of the bench's own on the server of ``DATABASE_URL``
  (``<name>_<suffix>``), created (or kept, with ``reuse``), migrated, with Django pointed at
  it; dropped when the process exits unless ``BENCH_KEEP=1`` or it is kept for reuse.
* ``goal_record``: one line per goal — the figure, its ceiling measured in the same run, the
  ratio, the goal, "met" or "not met" — printed at once and appended to ``BENCH_GOALS`` (a
  JSON-lines file that ``python -m bench`` sets, to print every goal together at the end).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))


def load() -> str:
    """The machine's load average: other work on these cores skews every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def database_setup(
    suffix: str,
    *,
    settings_module: str = "config.settings.test",
    reuse: bool = False,
    env: dict[str, str] | None = None,
) -> bool:
    """Creates ``<DATABASE_URL's name>_<suffix>`` (recreated unless ``reuse`` finds it),
    points Django at it, sets Django up and migrates. Returns True when an existing database
    was kept. A recreated database is dropped when the process exits (``BENCH_KEEP=1``: kept)."""
    import psycopg

    parts = urlsplit(os.environ["DATABASE_URL"])
    name = (parts.path.lstrip("/") + "_" + suffix).replace(".", "_")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        kept = reuse and exists is not None
        if not kept:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.update(env or {})
    if not reuse and os.environ.get("BENCH_KEEP", "") != "1":
        atexit.register(_drop, admin, name)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return kept


def _drop(admin: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error as exc:  # a bench's result matters more than its clean-up
        print(f"(bench database {name} not dropped: {exc})")


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A child process in a session of its own (``stop`` ends it with its children)."""
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip  # noqa: E501


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Goal:
    """One stage's goal, judged in one run: ``figure`` against ``ceiling`` (the same work at
    its physical limit, measured beside it), their ``ratio``, and what the goal asks of it."""

    stage: str
    figure: str
    ceiling: str
    ratio: str
    goal: str
    met: bool
    note: str = ""

    def line(self) -> str:
        verdict = "met" if self.met else "not met"
        note = f"  [{self.note}]" if self.note else ""
        return (
            f"{self.stage}: {self.figure} | ceiling {self.ceiling} | ratio {self.ratio} | "
            f"goal {self.goal} | {verdict}{note}"
        )


def goal_record(goal: Goal) -> bool:
    """Prints the goal's line and keeps it for ``python -m bench``'s summary; returns met."""
    print(f"  GOAL {goal.line()}", flush=True)
    path = os.environ.get("BENCH_GOALS", "")
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(goal)) + "\n")
    return goal.met


def goals_read(path: str) -> list[Goal]:
    if not Path(path).exists():
        return []
    with Path(path).open(encoding="utf-8") as f:
        return [Goal(**json.loads(line)) for line in f if line.strip()]

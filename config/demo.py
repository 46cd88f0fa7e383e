"""``make demo``: one command that brings up a whole Steward on this machine.

Starts the embedded engines when no URLs are given, migrates, loads the demo data, then runs
the web server, a Celery worker and Celery beat side by side. The simulated nodes then

1. backfill the previous month (one sample a minute, big batches) through the real path:
   agent → signed batch → ingest endpoint → worker → derived pass, and exit once delivered;
   meanwhile ``manage.py demo_close_period --wait`` reports progress and, when that backlog
   is processed, enters the demo revenue, closes the month and publishes its statements
   (oscar requests, olga approves);
2. backfill the current month to date the same way, then go on live (5-s samples).

The portal is up from the start. Ctrl-C (or SIGTERM) stops the processes in reverse order,
then the engines. Imports no Django: it only supervises.

The terminal shows progress, not logs: a line when each node enrols, when it has backfilled
the previous month (naming the scripted faults in it), when the month is closed and
published, when the nodes go live, and when everything has stopped. The web server's,
worker's, beat's and agents' own output goes to ``var/demo-logs/<process>.log``; a process
that dies has its last lines printed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import signal
import struct
import subprocess
import sys
import time
import tomllib
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from config.embedded import BASE_DIR, engines

PYTHON = sys.executable
DEMO_PASSWORD = "steward-demo-2026"  # noqa: S105 - demo logins, printed on screen
# The demo operator's authenticator secret (portal/demo.py seeds the same one): operators
# log in with a second factor, so the banner prints what an authenticator app would show.
DEMO_TOTP_SECRET = "ON2GK53BOJSC2ZDFNVXS25DPORYC2MRQ"  # noqa: S105 - demo only, printed on screen
DEMO_LOGINS = [
    ("operator", "oscar@steward.example"),
    ("operator, billing officer", "olga@steward.example"),
    ("owner (Alice Compute Ltd)", "alice@owner.example"),
    ("owner (Bob Chen)", "bob@owner.example"),
    ("partner (Carol Marketplace)", "carol@partner.example"),
]


def _manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([PYTHON, str(BASE_DIR / "manage.py"), *args], env=env, check=True)


def _processes(port: int, var_dir: Path) -> list[tuple[str, list[str]]]:
    celery = [PYTHON, "-m", "celery", "-A", "config"]
    return [
        (
            "web",
            [PYTHON, str(BASE_DIR / "manage.py"), "runserver", f"127.0.0.1:{port}", "--noreload"],
        ),
        (
            "worker",
            [
                *celery,
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--without-gossip",
                "--without-mingle",
            ],
        ),
        (
            "beat",
            [*celery, "beat", "--loglevel=INFO", f"--schedule={var_dir / 'celerybeat-schedule'}"],
        ),
    ]


def totp_now(secret: str, at: float | None = None) -> str:
    """RFC 6238 code (SHA-1, 30 s, 6 digits), as an authenticator app shows it."""
    counter = int(time.time() if at is None else at) // 30
    mac = hmac.new(base64.b32decode(secret), struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return f"{(int.from_bytes(mac[offset : offset + 4]) & 0x7FFFFFFF) % 10**6:06d}"


def month_starts(now: datetime) -> tuple[datetime, datetime]:
    """The first instants (UTC) of the previous and of the current calendar month."""
    current = datetime(now.year, now.month, 1, tzinfo=UTC)
    previous = datetime(now.year - (now.month == 1), (now.month - 2) % 12 + 1, 1, tzinfo=UTC)
    return previous, current


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _agent_commands(
    port: int, agents_dir: Path, backfill: tuple[datetime, datetime | None]
) -> list[tuple[str, list[str]]]:
    """One `steward-agent --fake` per simulated node, from the manifest the seed wrote.

    Each backfills from ``backfill[0]`` (resuming after the last window it sealed on an earlier
    run) to ``backfill[1]`` and exits once delivered, or with no end, catches up to now and
    goes on live.
    """
    agent = Path(sys.executable).with_name("steward-agent")
    if not agent.exists():
        raise SystemExit(f"{agent} is missing: run `make install` (it installs steward-agent).")
    manifest = json.loads((agents_dir / "agents.json").read_text(encoding="utf-8"))
    commands = []
    for entry in manifest:
        command = [
            str(agent), "--fake", entry["scenario"], "--server", f"http://127.0.0.1:{port}",
            "--key-file", entry["key_file"], "--spool", entry["spool"], "--log-level", "WARNING",
            "--backfill-from", _iso(backfill[0]),
        ]  # fmt: skip
        if backfill[1] is not None:
            command += ["--backfill-until", _iso(backfill[1]), "--drain-timeout", "3600"]
        if entry["bootstrap_token"]:
            command += [f"--bootstrap-token={entry['bootstrap_token']}"]
        commands.append((f"agent {entry['hostname']}", command))
    return commands


def _scripted_faults(scenario: str) -> list[str]:
    """The faults a node's scenario schedules, as a reader would say them."""
    faults = tomllib.loads(Path(scenario).read_text(encoding="utf-8")).get("faults", [])
    said = []
    for fault in faults:
        kind = fault.get("kind", "fault")
        what = f"XID {fault['xid']}" if kind == "xid" else kind.replace("_", " ")
        said.append(f"{what} on GPU {fault.get('gpu', '?')}, {_offset(fault.get('at'))} in")
    return said


def _offset(value: object) -> str:
    """A scenario's "206h" / "12560m" / "90s" offset as "8 d 14 h" / "8 d 17 h 20 min"."""
    text = str(value).strip()
    unit = {"h": 3600, "m": 60, "s": 1}.get(text[-1:], 1)
    try:
        seconds = int(float(text.rstrip("hms")) * unit)
    except ValueError:
        return text
    days, rest = divmod(seconds, 86_400)
    parts = [(days, "d"), (rest // 3600, "h"), (rest % 3600 // 60, "min"), (rest % 60, "s")]
    return " ".join(f"{n} {u}" for n, u in parts if n) or "0 s"


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _wait_until_serving(port: int, children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(child.poll() is not None for _, child in children):
            return  # the main loop reports which one died
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.5)


def _banner(
    port: int, agents: int, previous: datetime, current: datetime, *, again: bool, logs: Path
) -> str:
    logins = "\n".join(f"    {role:<30} {email}" for role, email in DEMO_LOGINS)
    if again:
        what = (
            f"  This run continues the data an earlier run left in {logs.parent}: what it seeded,\n"
            f"  closed and published stays; each node resumes after the last minute it sealed,\n"
            f"  and {previous:%B %Y} is closed now only if it was not yet. `make clean` starts\n"
            f"  afresh.\n\n"
        )
    else:
        what = ""
    return (
        f"\n  Steward demo is running.\n\n"
        f"{what}"
        f"    owner portal       http://127.0.0.1:{port}/\n"
        f"    operator console   http://127.0.0.1:{port}/admin/\n"
        f"    health             http://127.0.0.1:{port}/readyz\n"
        f"    ingest health      http://127.0.0.1:{port}/admin/telemetry/nodestatus/ingest-health/\n\n"
        f"  {agents} simulated GPU nodes (steward-agent --fake) first backfill {previous:%B %Y}\n"
        f"  through the real ingest path (agent → signed batch → endpoint → worker); then\n"
        f"  {previous:%B %Y} is closed and its statements published (oscar requests, olga\n"
        f"  approves) — watch for 'demo: {previous:%B %Y} is closed'. The nodes then backfill\n"
        f"  {current:%B} to date and go on live. Progress is printed here as it goes; the\n"
        f"  processes' own logs are in {logs}/.\n\n"
        f"  Logins (password for all: {DEMO_PASSWORD}):\n{logins}\n\n"
        f"  The operator console asks oscar and olga for a second factor (publishing a\n"
        f"  statement takes two operators; in the demo both use this authenticator secret):\n"
        f"    {DEMO_TOTP_SECRET}\n"
        f"    otpauth://totp/Steward:oscar%40steward.example?secret={DEMO_TOTP_SECRET}"
        f"&issuer=Steward&digits=6&period=30\n"
        f"    current code: {totp_now(DEMO_TOTP_SECRET)}"
        f" (`python -m config.demo totp` prints a fresh one)\n\n"
        f"  Ctrl-C stops everything.\n"
    )


def _stop(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    for _name, child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for _name, child in reversed(children):
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main() -> int:
    port = int(os.environ.get("STEWARD_DEMO_PORT", "8000"))
    var_dir = Path(os.environ.get("STEWARD_VAR_DIR", BASE_DIR / "var")).resolve()
    logs = var_dir / "demo-logs"
    stopping = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    agents_dir = var_dir / "demo-agents"
    again = (agents_dir / "agents.json").exists()  # an earlier run seeded and started nodes
    embedded = not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))
    with engines(var_dir) as added:
        env = {**os.environ, **added, "DJANGO_SETTINGS_MODULE": "config.settings.dev"}
        env.setdefault("STEWARD_DEMO_PASSWORD", DEMO_PASSWORD)
        _manage("migrate", "--noinput", env=env)
        _manage("seed_demo", "--agents-dir", str(agents_dir), env=env)
        logs.mkdir(parents=True, exist_ok=True)
        previous, current = month_starts(datetime.now(UTC))
        children: list[tuple[str, subprocess.Popen[bytes]]] = []  # must keep running
        backfill: list[tuple[str, subprocess.Popen[bytes]]] = []  # phase 1: exit when done
        log_of: dict[str, Path] = {}

        def start(
            name: str, command: list[str], *, to_terminal: bool = False
        ) -> tuple[str, subprocess.Popen[bytes]]:
            # Own process group: Ctrl-C reaches only us, and we stop children in order.
            if to_terminal:
                return name, subprocess.Popen(command, env=env, start_new_session=True)
            log_of[name] = logs / f"{name.replace(' ', '-')}.log"
            with log_of[name].open("ab") as out:
                child = subprocess.Popen(
                    command, env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
                )
            return name, child

        def died(name: str, code: int | None) -> None:
            print(f"demo: {name} exited with {code}; its last lines ({log_of.get(name)}):")
            print(_log_tail(log_of[name]) if name in log_of else "", flush=True)

        try:
            for name, command in _processes(port, var_dir):
                children.append(start(name, command))
            _wait_until_serving(port, children)
            began = time.monotonic()
            manifest = json.loads((agents_dir / "agents.json").read_text(encoding="utf-8"))
            unenrolled = {
                e["hostname"]: Path(e["key_file"]) for e in manifest if e["bootstrap_token"]
            }
            faults = {e["hostname"]: _scripted_faults(e["scenario"]) for e in manifest}
            agents = _agent_commands(port, agents_dir, (previous, current))
            backfill = [start(name, command) for name, command in agents]
            close = [PYTHON, str(BASE_DIR / "manage.py"), "demo_close_period"]
            close += ["--month", f"{previous:%Y-%m}", "--wait", "3600", "--every", "15"]
            backfill.append(start("demo_close_period", close, to_terminal=True))
            print(_banner(port, len(agents), previous, current, again=again, logs=logs), flush=True)
            said: set[str] = set()
            live = False
            code = 0
            while not stopping:
                exited = [
                    (name, child.returncode) for name, child in children if child.poll() is not None
                ]
                if exited:
                    died(*exited[0])
                    code = 1
                    break
                for host, key_file in unenrolled.items():
                    if f"enrolled {host}" not in said and key_file.exists():
                        said.add(f"enrolled {host}")
                        print(f"demo: node {host} enrolled (its key is in {key_file})", flush=True)
                for name, child in backfill:
                    if child.poll() == 0 and name not in said and name.startswith("agent "):
                        said.add(name)
                        host = name.removeprefix("agent ")
                        scripted = "; ".join(faults.get(host, [])) or "no scripted fault"
                        print(
                            f"demo: node {host} backfilled {previous:%B %Y} and delivered it "
                            f"({scripted})",
                            flush=True,
                        )
                failed = [(n, c.returncode) for n, c in backfill if c.poll() not in (None, 0)]
                if failed and not live:
                    for _name, child in backfill:  # the close would wait for them in vain
                        if child.poll() is None:
                            child.terminate()
                if not live and all(child.poll() is not None for _, child in backfill):
                    if failed:
                        died(*failed[0])
                        print(
                            f"demo: {previous:%B %Y} was not closed. The nodes go on live.",
                            flush=True,
                        )
                    else:
                        print(
                            f"demo: {previous:%B %Y} backfilled, closed and published "
                            f"{time.monotonic() - began:.0f} s after the portal came up.",
                            flush=True,
                        )
                    for name, command in _agent_commands(port, agents_dir, (current, None)):
                        children.append(start(name, command))
                    print(
                        f"demo: the {len(agents)} nodes are live: each backfills {current:%B} to "
                        "date, then samples every 5 s (scripted faults again, counted from "
                        f"{current:%B} 1).",
                        flush=True,
                    )
                    live = True
                time.sleep(0.5)
            print("demo: stopping…", flush=True)
        finally:
            _stop(children + backfill)
            print("demo: the web server, worker, beat and nodes have stopped.", flush=True)
    if embedded:  # leaving the engines' context stopped them
        print(
            f"demo: the embedded PostgreSQL and Redis have stopped; their data stays in {var_dir}."
        )
    return code


if __name__ == "__main__":
    if sys.argv[1:] == ["totp"]:
        print(totp_now(DEMO_TOTP_SECRET))
        sys.exit(0)
    sys.exit(main())

"""``make demo``: one command that brings up a whole Steward on this machine.

Starts the embedded engines when no URLs are given, migrates, loads the demo data, then runs
the web server, a Celery worker and Celery beat side by side. Ctrl-C (or SIGTERM) stops the
processes in reverse order, then the engines. Imports no Django: it only supervises.
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
import urllib.request
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


def _agent_commands(port: int, agents_dir: Path) -> list[tuple[str, list[str]]]:
    """One `steward-agent --fake` per simulated node, from the manifest the seed wrote."""
    agent = Path(sys.executable).with_name("steward-agent")
    if not agent.exists():
        raise SystemExit(f"{agent} is missing: run `make install` (it installs steward-agent).")
    manifest = json.loads((agents_dir / "agents.json").read_text(encoding="utf-8"))
    commands = []
    for entry in manifest:
        command = [
            str(agent), "--fake", entry["scenario"], "--server", f"http://127.0.0.1:{port}",
            "--key-file", entry["key_file"], "--spool", entry["spool"], "--log-level", "WARNING",
        ]  # fmt: skip
        if entry["bootstrap_token"]:
            command += ["--bootstrap-token", entry["bootstrap_token"]]
        commands.append((f"agent {entry['hostname']}", command))
    return commands


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


def _banner(port: int, agents: int) -> str:
    logins = "\n".join(f"    {role:<30} {email}" for role, email in DEMO_LOGINS)
    return (
        f"\n  Steward demo is running.\n\n"
        f"    owner portal       http://127.0.0.1:{port}/\n"
        f"    operator console   http://127.0.0.1:{port}/admin/\n"
        f"    health             http://127.0.0.1:{port}/readyz\n"
        f"    ingest health      http://127.0.0.1:{port}/admin/telemetry/nodestatus/ingest-health/\n\n"
        f"  {agents} simulated GPU nodes (steward-agent --fake) send telemetry every minute.\n\n"
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
    stopping = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    with engines(var_dir) as added:
        env = {**os.environ, **added, "DJANGO_SETTINGS_MODULE": "config.settings.dev"}
        env.setdefault("STEWARD_DEMO_PASSWORD", DEMO_PASSWORD)
        _manage("migrate", "--noinput", env=env)
        agents_dir = var_dir / "demo-agents"
        _manage("seed_demo", "--agents-dir", str(agents_dir), env=env)
        children: list[tuple[str, subprocess.Popen[bytes]]] = []
        try:
            for name, command in _processes(port, var_dir):
                # Own process group: Ctrl-C reaches only us, and we stop children in order.
                children.append((name, subprocess.Popen(command, env=env, start_new_session=True)))
            _wait_until_serving(port, children)
            agents = _agent_commands(port, agents_dir)
            for name, command in agents:
                children.append((name, subprocess.Popen(command, env=env, start_new_session=True)))
            print(_banner(port, len(agents)), flush=True)
            while not stopping:
                exited = [
                    (name, child.returncode) for name, child in children if child.poll() is not None
                ]
                if exited:
                    print(f"demo: {exited[0][0]} exited with {exited[0][1]}; stopping", flush=True)
                    return 1
                time.sleep(0.5)
            print("demo: stopping…", flush=True)
            return 0
        finally:
            _stop(children)


if __name__ == "__main__":
    if sys.argv[1:] == ["totp"]:
        print(totp_now(DEMO_TOTP_SECRET))
        sys.exit(0)
    sys.exit(main())

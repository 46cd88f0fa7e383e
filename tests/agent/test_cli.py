"""`steward-agent` as a real process against the loopback server."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .server import FakeSteward

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def live_steward():
    server = FakeSteward(now=time.time).start()  # the CLI signs with real time
    yield server
    server.stop()


def run_agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "telemetry.agent.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fake_node_enrols_and_delivers_its_windows(tmp_path, live_steward):
    key = tmp_path / "node.key"
    result = run_agent(
        "--fake", "h100x8-gpu-lost",
        "--server", live_steward.url,
        "--bootstrap-token", "boot-token-1",
        "--key-file", str(key),
        "--spool", str(tmp_path / "spool.db"),
        "--speed", "600",
        "--duration", "15m",
        "--hostname", "demo-node",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    enrol = [r for r in live_steward.received if r.path == "/api/v1/agents/enrol"]
    assert len(enrol) == 1 and b'"hostname": "demo-node"' in enrol[0].body
    windows = live_steward.windows()
    assert len(windows) == 8 * 15
    assert {w["samples_expected"] for w in windows} == {12}
    lost = [w for w in windows if w["state_reason"] == "gpu_is_lost"]
    assert len(lost) == 3  # card 3, minutes 12, 13 and 14
    kinds = {e["kind"] for e in live_steward.events()}
    assert {"gpu_appeared", "xid", "gpu_lost"} <= kinds
    newest = max(w["window_start"] for w in windows)
    assert newest < time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # backfilled, not future
    assert "delivered" in result.stderr


def test_once_with_an_existing_key_file(tmp_path, live_steward):
    key = tmp_path / "node.key"
    first = run_agent(
        "--enrol-only", "--server", live_steward.url, "--bootstrap-token", "boot-token-1",
        "--key-file", str(key),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = run_agent(
        "--fake", "mixed", "--server", live_steward.url, "--key-file", str(key),
        "--spool", str(tmp_path / "spool.db"), "--speed", "600", "--once",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert {w["samples_expected"] for w in live_steward.windows()} == {12}
    assert len(live_steward.windows()) == 4


def test_without_a_key_or_token_it_refuses_to_start(tmp_path, live_steward):
    result = run_agent(
        "--server", live_steward.url, "--key-file", str(tmp_path / "none.key"),
        "--spool", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert result.returncode == 2 and "bootstrap-token" in result.stderr


def test_real_pynvml_without_a_driver_reports_nvml_unavailable(tmp_path, live_steward):
    key = tmp_path / "node.key"
    run_agent(
        "--enrol-only", "--server", live_steward.url, "--bootstrap-token", "boot-token-1",
        "--key-file", str(key),
    )  # fmt: skip
    result = run_agent(
        "--server", live_steward.url, "--key-file", str(key), "--spool", str(tmp_path / "s.db"),
        "--no-kmsg", "--duration", "1s",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (event,) = live_steward.events()
    assert event["kind"] == "nvml_unavailable" and event["gpu_uuid"] is None
    assert event["detail"]["error"] in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


def test_a_fake_node_enrols_as_its_scenario_s_host(tmp_path, live_steward):
    result = run_agent(
        "--fake", "h100x8-gpu-lost",
        "--server", live_steward.url,
        "--bootstrap-token", "boot-token-1",
        "--key-file", str(tmp_path / "node.key"),
        "--spool", str(tmp_path / "spool.db"),
        "--enrol-only",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (enrol,) = [r for r in live_steward.received if r.path == "/api/v1/agents/enrol"]
    assert b'"hostname": "gpu-node-02"' in enrol.body  # the scenario's [node] hostname

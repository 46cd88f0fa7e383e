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
        "--speed", "300",  # 5 s of node time per 17 ms: every slot sampled on a busy CI box
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
        "--spool", str(tmp_path / "spool.db"), "--speed", "300", "--once",
    )  # fmt: skip
    # (At 600x a busy machine can wake the agent past the minute's end before its last
    # slots: they would pass unexpected.)
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


def _minute_iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts - ts % 60))


def test_backfill_samples_history_once_a_minute_in_big_batches_and_resumes(tmp_path, live_steward):
    now = time.time()
    key, spool = str(tmp_path / "node.key"), str(tmp_path / "spool.db")
    common = [
        "--fake", "h100x8-gpu-lost", "--server", live_steward.url, "--key-file", key,
        "--spool", spool, "--backfill-from", _minute_iso(now - 3 * 3600),
        "--backfill-batch", "400",
    ]  # fmt: skip
    first = run_agent(
        *common, "--bootstrap-token", "boot-token-1", "--backfill-until", _minute_iso(now - 3600)
    )
    assert first.returncode == 0, first.stderr
    windows = live_steward.windows()
    assert len(windows) == 8 * 120  # two hours of eight GPUs, every minute
    assert {w["samples_expected"] for w in windows} == {1}
    assert {w["samples_ok"] for w in windows} == {1}
    # The scenario's card falls off the bus 12 minutes after the node starts: faults count
    # from going live, so the backfilled history is clean.
    assert {w["state"] for w in windows} == {"up"}
    committed = [live_steward.committed[bid] for bid in live_steward.commit_order]
    sizes = sorted(len(doc["windows"]) for doc in committed if doc["windows"])
    assert sizes == [160, 400, 400]  # sealed every 400 windows, the rest at the end
    assert max(w["window_start"] for w in windows) == _minute_iso(now - 3600 - 60)

    # Run again to a later end: it resumes after the last window it sealed.
    again = run_agent(*common, "--backfill-until", _minute_iso(now - 1800))
    assert again.returncode == 0, again.stderr
    later = live_steward.windows()
    assert len(later) == 8 * 150
    assert len({(w["gpu_uuid"], w["window_start"]) for w in later}) == len(later)


def test_backfill_catches_up_with_now_then_goes_live(tmp_path, live_steward):
    now = time.time()
    result = run_agent(
        "--fake", "h100x8", "--server", live_steward.url, "--bootstrap-token", "boot-token-1",
        "--key-file", str(tmp_path / "node.key"), "--spool", str(tmp_path / "spool.db"),
        "--backfill-from", _minute_iso(now - 600), "--duration", "0s", "--log-level", "INFO",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "live from now" in result.stderr
    per_gpu: dict[str, list[str]] = {}
    for w in live_steward.windows():
        per_gpu.setdefault(w["gpu_uuid"], []).append(w["window_start"])
    assert len(per_gpu) == 8
    for starts in per_gpu.values():
        # Every minute from the start to the minute it went live, once each.
        assert starts[0] == _minute_iso(now - 600)
        assert len(starts) == len(set(starts)) >= 10
        assert max(starts) <= _minute_iso(time.time())

"""The capture script's recorder and the replay agree: a run recorded through
``scripts/nvml_capture.py``'s proxy and replayed by ``tests/agent/replay.py`` gives the agent
the same answers, so it seals the same windows. Here the recorded NVML is the fake (no GPU in
CI); on a GPU machine the same proxy records the real one."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from telemetry.agent.agent import AgentConfig
from telemetry.agent.clock import FakeClock
from telemetry.agent.fake import FakeGpu, FakeNvml
from telemetry.agent.fake.models import model

from .conftest import START, Node
from .helpers import events_of, spooled_docs, windows_of
from .replay import ReplayNvml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nvml_capture.py"


def recorder_class() -> Any:
    spec = importlib.util.spec_from_file_location("nvml_capture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Recorder


def run(tmp: Path, nvml: Any, clock: FakeClock) -> list[dict[str, Any]]:
    tmp.mkdir()
    node = Node(tmp, clock, fake=nvml, kmsg=False, config=AgentConfig(hostname="node-a"))
    try:
        node.run_until(START + 300)
    finally:
        node.close()
    return spooled_docs(str(tmp / "spool.db"))


def test_a_recorded_run_replays_to_the_same_windows(tmp_path):
    clock = FakeClock(START)
    gpus = [FakeGpu(slot=i, model=model("H100-SXM5-80GB"), bus=0x18 + i, seed=3) for i in (0, 1)]
    recorder = recorder_class()(FakeNvml(clock, gpus))
    recorded = run(tmp_path / "recorded", recorder, clock)
    fns = {call["fn"] for call in recorder.calls}
    assert {"nvmlInit", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetSamples"} <= fns

    replayed = run(tmp_path / "replayed", ReplayNvml(recorder.calls), FakeClock(START))

    # Two GPUs, five minutes each; the minute the agent stopped in had no second observed.
    assert len(windows_of(recorded)) == 10
    assert {w["util_method"] for w in windows_of(recorded)} == {"buffer"}
    assert windows_of(replayed) == windows_of(recorded)

    def without_ids(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "event_id"} for e in events_of(docs)]

    assert without_ids(replayed) == without_ids(recorded)

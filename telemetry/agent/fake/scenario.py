"""Scenario files (TOML or JSON) that describe a whole fake node and what goes wrong when.

[node]
hostname = "gpu-node-01"
start = "2026-11-21T10:00:00Z"   # where the fake clock starts
seed = 7

[[gpus]]
model = "H100-SXM5-80GB"
count = 8
busy = 0.70                        # share of minutes the card runs a job
# load = {busy = 2.5, idle = 2.5}  # or a load instead: busy/idle seconds, or
# load = {random = [0.1, 3.0], seed = 4}   # random stretches (see fake/loads.py)

[[faults]]
at = "12m"                         # offset from start: "90s", "12m", "1h" or seconds
kind = "gpu_lost"                  # see FAULT_KINDS
gpu = 3
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pynvml

from telemetry.agent.clock import Clock

from .device import FakeGpu
from .kernel_log import FakeKernelLog
from .loads import parse_load
from .models import model
from .nvml import FakeNvml

# Typical PCI bus numbers of an 8-GPU HGX board, then whatever comes next.
_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]

FAULT_KINDS = (
    "gpu_lost",
    "reset_required",
    "recover",
    "xid",
    "transient",
    "hang",
    "driver_reload",
    "nvml_unavailable",
    "nvml_available",
    "remove",
    "busy",
)


@dataclass(slots=True)
class Scenario:
    name: str
    hostname: str
    start: float
    seed: int
    driver_version: str
    cuda_version: int
    gpus: list[dict[str, Any]]
    faults: list[dict[str, Any]] = field(default_factory=list)

    def identities(self) -> list[tuple[int, str, str, str]]:
        """(slot, NVML UUID, serial, model name) of each card, without building a node.

        The identities derive from the seed alone, so a server can be told in advance which
        GPUs a simulated node will report (the demo seeds its inventory this way). A model that
        reports no serial (GeForce) has "" here.
        """
        return [
            (c.slot, c.uuid, c.serial if c.model.has("serial") else "", c.model.name)
            for c in self._cards()
        ]

    def build(self, clock: Clock, kernel_log_path: str | None = None) -> FakeNvml:
        """A fake NVML for this node, with the faults scheduled on `clock`."""
        cards = self._cards()
        fake = FakeNvml(
            clock,
            cards,
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
            kernel_log=FakeKernelLog(kernel_log_path, self.hostname),
        )
        for fault in self.faults:
            fake.at(self.start + parse_offset(fault["at"]), _fault_action(fault))
        return fake

    def _cards(self) -> list[FakeGpu]:
        cards: list[FakeGpu] = []
        for spec in self.gpus:
            for _ in range(int(spec.get("count", 1))):
                slot = len(cards)
                bus = _BUSES[slot] if slot < len(_BUSES) else 0xE0 + slot
                cards.append(
                    FakeGpu(
                        slot=slot,
                        model=model(spec["model"]),
                        bus=bus,
                        seed=self.seed,
                        busy=float(spec.get("busy", 0.7)),
                        load=parse_load(spec["load"], self.start) if "load" in spec else None,
                    )
                )
        return cards


def parse_offset(value: object) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(value))
    if not match:
        raise ValueError(f"bad time offset {value!r}; use e.g. '90s', '12m', '1h'")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _error_code(value: object) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(getattr(pynvml, f"NVML_ERROR_{str(value).upper()}"))
    except AttributeError:
        raise ValueError(f"unknown NVML error {value!r}") from None


def _fault_action(fault: dict[str, Any]) -> Callable[[FakeNvml], None]:
    kind = fault.get("kind")
    gpu = fault.get("gpu")
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {FAULT_KINDS}")

    def action(fake: FakeNvml) -> None:
        if kind == "gpu_lost":
            fake.lose_gpu(int(gpu))  # type: ignore[arg-type]
        elif kind == "reset_required":
            fake.require_reset(int(gpu))  # type: ignore[arg-type]
        elif kind == "recover":
            fake.recover_gpu(int(gpu))  # type: ignore[arg-type]
        elif kind == "xid":
            fake.inject_xid(
                int(gpu),  # type: ignore[arg-type]
                int(fault["xid"]),
                nvml=bool(fault.get("nvml", True)),
                kmsg=bool(fault.get("kmsg", True)),
            )
        elif kind == "transient":
            code = _error_code(fault.get("error", "UNKNOWN"))
            fake.fail_next(gpu, str(fault["call"]), code, int(fault.get("count", 1)))
        elif kind == "hang":
            fake.hang(gpu, fault.get("call"), float(fault.get("seconds", 5.0)))
        elif kind == "driver_reload":
            fake.driver_reload()
        elif kind == "nvml_unavailable":
            fake.set_unavailable(_error_code(fault.get("error", "DRIVER_NOT_LOADED")))
        elif kind == "nvml_available":
            fake.set_unavailable(None)
        elif kind == "remove":
            fake.remove_gpu(int(gpu))  # type: ignore[arg-type]
        elif kind == "busy":
            for card in fake.gpus if gpu is None else [fake.gpus[int(gpu)]]:
                card.busy = float(fault["value"])

    return action


def _parse_start(value: object) -> float:
    if value is None:
        return dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC).timestamp()
    if isinstance(value, dt.datetime):  # TOML datetimes arrive parsed
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return stamp.timestamp()
    text = str(value).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text).timestamp()


def load_scenario(source: str | Path) -> Scenario:
    """Load a scenario from a path, or by name from the scenarios shipped with the agent."""
    path = Path(source)
    if not path.exists():
        shipped = resources.files("telemetry.agent") / "scenarios"
        for candidate in (shipped / str(source), shipped / f"{source}.toml"):
            if candidate.is_file():
                path = Path(str(candidate))
                break
        else:
            raise FileNotFoundError(f"no scenario {source!r} (path or shipped name)")
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    node = data.get("node", {})
    gpus = data.get("gpus") or []
    if not gpus:
        raise ValueError(f"scenario {path} has no [[gpus]]")
    return Scenario(
        name=path.stem,
        hostname=str(node.get("hostname", "fake-node")),
        start=_parse_start(node.get("start")),
        seed=int(node.get("seed", 1)),
        driver_version=str(node.get("driver_version", "550.127.05")),
        cuda_version=int(node.get("cuda_version", 12040)),
        gpus=list(gpus),
        faults=list(data.get("faults") or []),
    )

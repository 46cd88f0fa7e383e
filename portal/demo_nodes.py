"""The demo's simulated GPU nodes: one fake-NVML scenario per node of the demo fleet.

Each node's GPUs derive their NVML UUIDs and serials from the node's seed, so the inventory
is seeded with exactly the identities the simulated agents will report, and their telemetry
goes through the real path: agent → signed batch → ingest endpoint → worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from telemetry.agent.fake.scenario import Scenario

DEMO_DRIVER = "550.127.05"
DEMO_CUDA = 12040


@dataclass(frozen=True)
class DemoNode:
    hostname: str
    cluster: str  # the cluster's code within the demo site
    model_key: str  # the fake NVML's model key
    seed: int
    busy: float  # share of time the node's GPUs are busy
    faults: tuple[dict[str, Any], ...] = field(default=())
    gpus: int = 8

    def scenario(self) -> Scenario:
        return Scenario(
            name=self.hostname,
            hostname=self.hostname,
            start=0.0,
            seed=self.seed,
            driver_version=DEMO_DRIVER,
            cuda_version=DEMO_CUDA,
            gpus=[{"model": self.model_key, "count": self.gpus, "busy": self.busy}],
            faults=list(self.faults),
        )

    def scenario_toml(self) -> str:
        """The scenario as the agent's ``--fake`` reads it; faults count from the agent's start."""
        lines = [
            f"# Demo node {self.hostname}, written by `manage.py seed_demo`.",
            "[node]",
            f'hostname = "{self.hostname}"',
            f"seed = {self.seed}",
            f'driver_version = "{DEMO_DRIVER}"',
            f"cuda_version = {DEMO_CUDA}",
            "",
            "[[gpus]]",
            f'model = "{self.model_key}"',
            f"count = {self.gpus}",
            f"busy = {self.busy}",
        ]
        for fault in self.faults:
            lines += ["", "[[faults]]"]
            lines += [
                f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}"
                for key, value in fault.items()
            ]
        return "\n".join(lines) + "\n"


def _nodes() -> list[DemoNode]:
    nodes = []
    for index, (cluster, model_key) in enumerate(
        [("a", "H100-SXM5-80GB")] * 4 + [("b", "H200-SXM5-141GB")] * 4
    ):
        number = index % 4 + 1
        # Faults count from the agent's start: on a first run, from the first instant of the
        # month it backfills and closes (portal/demo.py records the incident, maintenance and
        # sale that go with them, dated in that month).
        faults: tuple[dict[str, Any], ...] = ()
        if (cluster, number) == ("a", 1):
            # One of Alice's H100s falls off the bus on day 9 at 14:00 (Xid 79) and is back at
            # 17:20: the operator's incident covers it.
            faults = (
                {"at": "206h", "kind": "gpu_lost", "gpu": 2},
                {"at": "12560m", "kind": "recover", "gpu": 2},
            )
        if (cluster, number) == ("a", 2):
            # A GPU Bob bought from Alice drops out of the node's inventory for 6 hours on day
            # 14 from 09:00: a silent stretch (no data), not down time.
            faults = (
                {"at": "321h", "kind": "remove", "gpu": 6},
                {"at": "327h", "kind": "recover", "gpu": 6},
            )
        if (cluster, number) == ("b", 1):
            # A contained ECC error five minutes in on a GPU Bob owns half of: degraded, not down.
            faults = ({"at": "5m", "kind": "xid", "gpu": 5, "xid": 94},)
        if (cluster, number) == ("b", 4):
            # A card falls off the bus half an hour in (Xid 79): down until an operator acts.
            faults = ({"at": "30m", "kind": "gpu_lost", "gpu": 3},)
        nodes.append(
            DemoNode(
                hostname=f"fra1-{cluster}-n{number:02d}",
                cluster=cluster,
                model_key=model_key,
                seed=100 + index,
                busy=round(0.55 + 0.05 * number, 2),
                faults=faults,
            )
        )
    return nodes


DEMO_NODES: list[DemoNode] = _nodes()

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry.agent.agent import Agent, AgentConfig
from telemetry.agent.clock import FakeClock
from telemetry.agent.credentials import Credentials
from telemetry.agent.fake import FakeNvml, load_scenario
from telemetry.agent.kmsg import KernelLogReader
from telemetry.agent.spool import Spool
from telemetry.agent.transport import HttpTransport
from telemetry.agent.uploader import Uploader

from .server import FakeSteward

START = 1_795_255_200.0  # 2026-11-21T10:00:00Z, a minute boundary


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def steward(clock: FakeClock) -> Iterator[FakeSteward]:
    server = FakeSteward(now=clock.now).start()
    yield server
    server.stop()


class Node:
    """A simulated node: fake NVML + agent + spool (+ uploader when a server is given)."""

    def __init__(
        self,
        tmp: Path,
        clock: FakeClock,
        scenario: str = "h100x8",
        server: FakeSteward | None = None,
        *,
        fake: FakeNvml | None = None,
        kmsg: bool = True,
        config: AgentConfig | None = None,
        spool_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tmp = tmp
        self.clock = clock
        self.kmsg_path = str(tmp / "kern.log") if kmsg else None
        if fake is None:
            fake = load_scenario(scenario).build(clock, kernel_log_path=self.kmsg_path)
        elif self.kmsg_path is not None:
            fake.kernel_log.path = Path(self.kmsg_path)
            fake.kernel_log.path.touch()
        self.fake = fake
        self.spool = Spool(str(tmp / "spool.db"), clock=clock, **(spool_kwargs or {}))
        self.config = config or AgentConfig(hostname="node-a", sample_timeout_s=0.5)
        self.kernel_log = (
            KernelLogReader(self.kmsg_path, clock=clock) if self.kmsg_path is not None else None
        )
        self.agent = Agent(
            nvml=fake,
            clock=clock,
            spool=self.spool,
            config=self.config,
            kernel_log=self.kernel_log,
        )
        self.closed = False
        self.uploader: Uploader | None = None
        self.transport: HttpTransport | None = None
        if server is not None:
            self.transport = HttpTransport(server.url, timeout_s=5)
            creds = Credentials(server.node_id, server.node_key)
            self.uploader = Uploader(
                spool=self.spool, transport=self.transport, credentials=lambda: creds, clock=clock
            )

    def run_until(self, until: float) -> None:
        """Advance simulated time, ticking the agent and pumping the uploader when due."""
        while True:
            now = self.clock.now()
            due = self.agent.tick()
            if self.uploader is not None:
                for _ in range(10_000):
                    up = self.uploader.pump()
                    if up > self.clock.now():
                        break
                due = min(due, up)
            if now >= until:
                return
            self.clock.set(min(max(due, now + 0.001), until))

    def deliver_until(self, until: float) -> None:
        """Only the uploader runs (the agent has stopped): drain the spool."""
        assert self.uploader is not None
        while self.clock.now() < until and self.spool.count():
            due = self.uploader.pump()
            if due > self.clock.now():
                self.clock.set(min(due, until))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.agent.shutdown()
        if self.transport is not None:
            self.transport.close()
        if self.kernel_log is not None:
            self.kernel_log.close()
        self.spool.close()


@pytest.fixture
def make_node(tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    nodes: list[Node] = []

    def make(*args: Any, **kwargs: Any) -> Node:
        sub = tmp_path / f"node{len(nodes)}"
        sub.mkdir()
        node = Node(sub, clock, *args, **kwargs)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.close()

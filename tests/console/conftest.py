"""Console fixtures: the telemetry fixtures (a node with placed GPUs, a signed poster, frozen
time), so incidents are opened through the real ingest path and derived pass."""

from __future__ import annotations

from tests.telemetry.conftest import _windows_emptied, node, now, post

__all__ = ["_windows_emptied", "node", "now", "post"]

"""The telemetry fixtures (a node with placed GPUs and its key, a signed poster, frozen time)."""

from tests.telemetry.conftest import _windows_emptied, node, now, post

__all__ = ["_windows_emptied", "node", "now", "post"]

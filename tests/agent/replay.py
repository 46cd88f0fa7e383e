"""``pynvml`` answering from a recording made by ``scripts/nvml_capture.py``.

Each function gives back what the real one answered, call after call, in the recorded order
(per function and arguments), and repeats its last answer once the recording runs out.
A recording without a single ``nvmlDeviceGetSamples`` call was made by an agent that never
asked for the driver's sample buffer: the replay answers NotSupported, as a card without one
would, so the agent reads utilization the way the recorded agent did (instantaneously).
Structs come back as objects with the recorded fields, errors as the real ``pynvml`` error
for the recorded code, handles as pointers. Constants and classes are ``pynvml``'s own.
The recordings of real cards kept in ``fixtures/`` (one folder per card) are read here too.
"""

from __future__ import annotations

import collections
import ctypes
import json
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from telemetry.agent.node import handle_key

FIXTURES = Path(__file__).parent / "fixtures"


def _jsonl(card: str, name: str) -> list[dict[str, Any]]:
    with (FIXTURES / card / name).open() as f:
        return [json.loads(line) for line in f]


@cache
def recorded_calls(card: str) -> list[dict[str, Any]]:
    """Every NVML call the agent made on the real card, in order."""
    return _jsonl(card, "calls.jsonl")


@cache
def recorded_batches(card: str) -> list[dict[str, Any]]:
    """The batches the agent sent from the real card."""
    return _jsonl(card, "batches.jsonl")


@cache
def recorded_memory(card: str) -> dict[str, Any]:
    """v1 and v2 memory answers, idle and with 1 GiB held (``nvml_capture.py --memory``)."""
    return json.loads((FIXTURES / card / "memory.json").read_text())  # type: ignore[no-any-return]


class ReplayNvml:
    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self._answers: dict[str, collections.deque[dict[str, Any]]] = collections.defaultdict(
            collections.deque
        )
        self._last: dict[str, dict[str, Any]] = {}
        self._handles: dict[int, Any] = {}
        for entry in calls:
            self._answers[self._key(entry["fn"], entry["args"], entry.get("kwargs"))].append(entry)
        self._has_buffer = any(entry["fn"] == "nvmlDeviceGetSamples" for entry in calls)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml") or isinstance(getattr(pynvml, name), int | type):
            return getattr(pynvml, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "nvmlDeviceGetSamples" and not self._has_buffer:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            key = self._key(name, [self._plain(a) for a in args], kwargs or None)
            queue = self._answers.get(key)
            if queue:
                self._last[key] = queue.popleft()
            entry = self._last.get(key)
            if entry is None:
                raise AssertionError(f"the recording never saw {key}")
            if "error" in entry:
                raise pynvml.NVMLError(entry["code"])
            return self._value(entry["result"])

        call.__name__ = name
        return call

    @staticmethod
    def _key(fn: str, args: list[Any], kwargs: dict[str, Any] | None) -> str:
        return json.dumps([fn, args, kwargs], sort_keys=True)

    def _plain(self, value: Any) -> Any:
        """An argument as the recording wrote it: handles by index, event sets as pointers."""
        if isinstance(value, ctypes._Pointer):
            address = handle_key(value)
            for index, handle in self._handles.items():
                if handle_key(handle) == address:
                    return {"handle": index}
            return {"pointer": bool(address)}
        return value

    def _value(self, result: Any) -> Any:
        if isinstance(result, dict) and set(result) == {"handle"}:
            index = result["handle"]
            if index not in self._handles:
                address = ctypes.c_void_p(0x1000 * (index + 1))
                self._handles[index] = ctypes.cast(address, pynvml.c_nvmlDevice_t)
            return self._handles[index]
        if isinstance(result, dict) and set(result) == {"pointer"}:
            return ctypes.cast(ctypes.c_void_p(0x10), ctypes.POINTER(ctypes.c_void_p))
        if isinstance(result, dict):
            return SimpleNamespace(**{k: self._value(v) for k, v in result.items()})
        if isinstance(result, list):
            return [self._value(v) for v in result]
        return result

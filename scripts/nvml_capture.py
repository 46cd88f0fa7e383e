"""Run the real agent on a GPU machine and record what NVML answered and what the agent sent.

    python3 scripts/nvml_capture.py OUT_DIR [--seconds 260] [--load-at 65] [--load-for 100]

Needs only the standard library, ``pynvml`` (nvidia-ml-py) and, for the load phase, PyTorch.
A stand-in Steward (``tests/agent/server.py``) takes the agent's enrolment and batches on
127.0.0.1, so nothing leaves the machine.  Every call the agent makes into ``pynvml`` goes
through a recording proxy.  Writes into OUT_DIR:

* ``calls.jsonl``: one line per NVML call: seconds since start, function, arguments (device
  handles as their index), the result as plain JSON or the error's class and code, microseconds;
* ``batches.jsonl``: each batch the agent delivered, as the decoded JSON document;
* ``host.json``: driver, nvidia-ml-py and Python versions, the GPUs' names;
* ``memory.json`` (with ``--memory``): GPU 0's memory through the v1 and the v2 struct, idle
  and while another process holds 1 GiB (the agent itself only asks for v2).

``tests/agent/fixtures/`` keeps what such runs on an H100 and an H200 produced;
``docs/agent.md`` says what they taught.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.agent.node import handle_key  # noqa: E402 - after the path is set

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


class Recorder(types.ModuleType):
    """``pynvml`` with every ``nvml*`` function logged; constants and classes pass through."""

    def __init__(self, real: Any) -> None:
        super().__init__("pynvml")
        self._real = real
        self._started = time.monotonic()
        self._handles: dict[int, int] = {}
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if name.startswith("nvml") and callable(attr) and not isinstance(attr, type):
            attr = self._wrap(name, attr)
            setattr(self, name, attr)
        return attr

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {
                "t": round(time.monotonic() - self._started, 4),
                "fn": name,
                "args": [self._plain(a) for a in args],
            }
            if kwargs:
                entry["kwargs"] = {k: self._plain(v) for k, v in kwargs.items()}
            begun = time.perf_counter_ns()
            try:
                result = fn(*args, **kwargs)
            except self._real.NVMLError as exc:
                entry["us"] = (time.perf_counter_ns() - begun) // 1000
                entry["error"] = type(exc).__name__
                entry["code"] = exc.value
                self._log(entry)
                raise
            entry["us"] = (time.perf_counter_ns() - begun) // 1000
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles[handle_key(result)] = int(args[0])
            entry["result"] = self._plain(result)
            self._log(entry)
            return result

        call.__name__ = name
        return call

    def _log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(entry)

    def _plain(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        if isinstance(value, ctypes._Pointer):  # a device handle or an event set
            address = handle_key(value)
            if address in self._handles:
                return {"handle": self._handles[address]}
            return {"pointer": bool(address)}
        if isinstance(value, ctypes.Structure | ctypes.Union):
            return {f[0]: self._plain(getattr(value, f[0])) for f in value._fields_}
        if isinstance(value, list | tuple | ctypes.Array):
            return [self._plain(v) for v in value]
        return repr(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seconds", type=int, default=260, help="how long the agent runs")
    p.add_argument("--load-at", type=int, default=65, help="start a matmul load after this")
    p.add_argument("--load-for", type=int, default=100, help="seconds of load (0: none)")
    p.add_argument("--memory", action="store_true", help="only record memory.json")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.memory:
        (args.out / "memory.json").write_text(json.dumps(memory_probe(), indent=2) + "\n")
        return 0

    import pynvml

    from telemetry.agent import cli
    from tests.agent.server import FakeSteward

    recorder = Recorder(pynvml)
    sys.modules["pynvml"] = recorder  # the agent's own `import pynvml` now gets the proxy
    steward = FakeSteward().start()
    load: subprocess.Popen[bytes] | None = None

    def start_load() -> None:
        nonlocal load
        code = LOAD.format(seconds=args.load_for)
        load = subprocess.Popen([sys.executable, "-c", code])  # noqa: S603 - our own code

    if args.load_for:
        threading.Timer(args.load_at, start_load).start()
    with tempfile.TemporaryDirectory() as tmp:
        rc = cli.main(
            [
                "--server", steward.url,
                "--bootstrap-token", "boot-token-1",
                "--key-file", f"{tmp}/node.key",
                "--spool", f"{tmp}/spool.db",
                "--duration", f"{args.seconds}s",
                "--log-level", "INFO",
            ]
        )  # fmt: skip
    if load is not None:
        load.wait()
    steward.stop()

    with (args.out / "calls.jsonl").open("w") as f:
        for entry in recorder.calls:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    with (args.out / "batches.jsonl").open("w") as f:
        for bid in steward.commit_order:
            f.write(json.dumps(steward.committed[bid], sort_keys=True) + "\n")
    host: dict[str, Any] = {
        "agent_rc": rc,
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "calls": len(recorder.calls),
        "batches": len(steward.commit_order),
        "kmsg_readable": os.access("/dev/kmsg", os.R_OK),
    }
    try:
        pynvml.nvmlInit()
        host["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        host["cuda_driver"] = pynvml.nvmlSystemGetCudaDriverVersion()
        host["gpus"] = [
            str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        host["nvml_error"] = str(exc)
    (args.out / "host.json").write_text(json.dumps(host, indent=2) + "\n")
    print(json.dumps(host, indent=2))
    return rc


HOLD = """
import sys, torch
block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("held", flush=True)
sys.stdin.read()
"""


def memory_probe() -> dict[str, Any]:
    import pynvml

    def read() -> dict[str, Any]:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return {
            "v1": {"total": v1.total, "used": v1.used, "free": v1.free},
            "v2": {"total": v2.total, "used": v2.used, "free": v2.free, "reserved": v2.reserved},
        }

    pynvml.nvmlInit()
    try:
        idle = read()
        holder = subprocess.Popen(  # noqa: S603 - our own code
            [sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert holder.stdout is not None and holder.stdin is not None
        holder.stdout.readline()
        time.sleep(1)
        holding = read()
        holder.stdin.close()
        holder.wait()
    finally:
        pynvml.nvmlShutdown()
    return {"idle": idle, "holding_1_gib": holding}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())

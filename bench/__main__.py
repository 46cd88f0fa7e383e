"""``python -m bench [NAME …]``: runs every ``bench/*_bench.py`` that has a ``main()``.

Each module owns its setup (its own database through ``bench.common``, its processes) and
prints its own figures. Each runs in a process of its own: Django is set up once per process,
on that bench's database. At the end, every goal the benches recorded is printed together —
figure, ceiling measured in the same run, ratio, goal, met or not met.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import goals_read, load


def discover() -> list[str]:
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*_bench.py"))


def run_one(name: str) -> int:
    module = importlib.import_module(f"bench.{name}")
    run = getattr(module, "main", None)
    if run is None:
        return 0
    return int(bool(run()))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:  # the child process of one bench
        return run_one(argv[1])
    names = discover()
    wanted = [a for a in argv if not a.startswith("-")] or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmarks: {', '.join(unknown)}; have: {', '.join(names)}")
        return 2
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        goals_path = str(Path(tmp) / "goals.jsonl")
        env = {**os.environ, "BENCH_GOALS": goals_path}
        for name in wanted:
            print(f"\n=== {name} ===", flush=True)
            code = subprocess.call([sys.executable, "-m", "bench", "--one", name], env=env)
            failures += int(code != 0)
        goals = goals_read(goals_path)
    if goals:
        print(f"\n=== goals ({os.cpu_count()} cores, {load()} at the end) ===")
        for goal in goals:
            print(goal.line())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m bench [NAME …]``: runs every ``bench/*_bench.py`` that has a ``main()``.

Each module owns its setup (its own database, processes) and prints its own figures.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def discover() -> list[str]:
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*_bench.py"))


def main(argv: list[str]) -> int:
    names = discover()
    wanted = [a for a in argv if not a.startswith("-")] or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmarks: {', '.join(unknown)}; have: {', '.join(names)}")
        return 2
    failures = 0
    for name in wanted:
        module = importlib.import_module(f"bench.{name}")
        run = getattr(module, "main", None)
        if run is None:
            continue
        print(f"\n=== {name} ===", flush=True)
        failures += int(bool(run()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

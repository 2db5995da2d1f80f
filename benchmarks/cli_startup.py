"""How long the CLI takes to start (issue 39: ``--version`` at most 0.3 s of import time,
``compile hello`` at most 0.5 s), beside ``pytest --version`` in the same run.

  python3 benchmarks/cli_startup.py [--runs 7] [--venv .venv]

Each command runs RUNS times in a fresh interpreter under ``-X importtime``; a row reports the
median of the summed top-level import times and the median wall time of the whole process.
No CPU frequency pinning: run it on an idle machine and read the medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = {
    "pipeline-core --version": ["-m", "pipeline_core.cli", "--version"],
    "pipeline-core compile hello": ["-m", "pipeline_core.cli", "compile", "hello"],
    "pipeline-core schedules": ["-m", "pipeline_core.cli", "schedules"],
    "pytest --version": ["-m", "pytest", "--version"],
}


def import_seconds(stderr: str) -> float:
    """The summed top-level (depth 0) cumulative import times ``-X importtime`` printed."""
    total = 0
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line.split(":", 1)[1].split("|")
            if not name[1:].startswith(" "):  # depth 0: one space after the bar
                total += int(cumulative)
    return total / 1e6


def measure(python: str, argv: list[str], runs: int) -> dict:
    imports, walls = [], []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([python, "-X", "importtime", *argv], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        imports.append(import_seconds(proc.stderr))
    return {"import_s": round(statistics.median(imports), 3),
            "wall_s": round(statistics.median(walls), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--venv", default=str(Path(__file__).resolve().parents[1] / ".venv"))
    args = ap.parse_args(argv)
    python = str(Path(args.venv) / "bin" / "python")
    if not Path(python).exists():
        python = sys.executable
    for name, command in COMMANDS.items():
        print(json.dumps({"command": name, **measure(python, command, args.runs)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

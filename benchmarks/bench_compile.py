"""Compile-time benchmark: median in-process compile time, peak memory, cold CLI wall time.

    python benchmarks/bench_compile.py [--repeat 200]

Targets (issue 10, on a 2-core machine): <= 2 ms median per ping-pong / 4-wave compile in
process, <= 0.4 s for a cold `pipeline-core compile` process.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

CASES = {
    "pingpong (BF16 production)": ("pingpong", {"dtype": "bf16", "BM": "256", "BN": "256", "BK": "64",
                                                "MMA_M": "16", "MMA_N": "16", "MMA_K": "32"}),
    "pingpong (test config)": ("pingpong", {}),
    "4wave (FP8 128^3)": ("4wave", {}),
    "4wave (FP8 BM=64)": ("4wave", {"BM": "64", "BN": "64"}),
    "default-matmul (T=2)": ("default-matmul", {}),
}


def bench(repeat: int) -> list[tuple[str, float, float, float]]:
    from pipeline_core.api import build_named
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.plugins import default_host

    host = default_host()
    rows = []
    for label, (name, params) in CASES.items():
        schedule, target, values = build_named(name, params=params, host=host)
        compile_schedule(schedule, host=host, target_name=target)  # warm caches
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            compile_schedule(schedule, host=host, target_name=target)
            times.append(time.perf_counter() - t0)
        tracemalloc.start()
        compile_schedule(schedule, host=host, target_name=target)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rows.append((label, statistics.median(times) * 1e3, min(times) * 1e3, peak / 1024))
    return rows


def cold_cli(runs: int = 5) -> float:
    exe = Path(sys.executable).with_name("pipeline-core")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pipeline_core.cli"]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd + ["compile", "pingpong", "--format", "json", "-o", "/dev/null"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    print(f"{'schedule':<30} {'median ms':>10} {'min ms':>8} {'peak KiB':>9}")
    for label, med, best, peak in bench(args.repeat):
        print(f"{label:<30} {med:>10.3f} {best:>8.3f} {peak:>9.1f}")
    print(f"cold `pipeline-core compile pingpong` process: {cold_cli():.3f} s (median of 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

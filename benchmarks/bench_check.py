"""Benchmark of the hazard checker: time per golden schedule (median over repeats).

    python3 benchmarks/bench_check.py [--repeats N] [--iterations N] [--budget-ms MS] [--goldens DIR]

Times ``check_document`` on each golden (decode + execute + ANTI-edge report), the
same with ``tightest=True`` (the wait-slack search), and with two warps per group.
Exits 1 when a plain check exceeds the budget (default 50 ms: it must be cheap
enough to run on every compile).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_core.check import check_document  # noqa: E402

DEFAULT_GOLDENS = ROOT / "tests" / "goldens"


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--budget-ms", type=float, default=50.0)
    p.add_argument("--goldens", type=Path, default=DEFAULT_GOLDENS)
    args = p.parse_args(argv)

    rows = []
    for path in sorted(args.goldens.glob("*.json")):
        doc = json.loads(path.read_text())
        it = args.iterations
        plain = median_ms(lambda: check_document(doc, iterations=it), args.repeats)
        tight = median_ms(lambda: check_document(doc, iterations=it, tightest=True),
                          max(3, args.repeats // 4))
        warps = median_ms(lambda: check_document(doc, iterations=it, warps_per_group=2), args.repeats)
        safe = check_document(doc, iterations=it).safe
        entries = sum(len(doc[k]) for k in ("prologue", "kernel", "epilogue"))
        rows.append((path.stem, entries, "SAFE" if safe else "UNSAFE", plain, tight, warps))

    print(f"hazard checker, {args.iterations} kernel iterations, median of {args.repeats} runs")
    print(f"{'schedule':42s} {'entries':>7s} {'verdict':>7s} {'check ms':>9s} "
          f"{'--tightest':>10s} {'2 warps/grp':>11s}")
    over = False
    for name, entries, verdict, plain, tight, warps in rows:
        flag = "  OVER BUDGET" if plain > args.budget_ms else ""
        over |= bool(flag)
        print(f"{name:42s} {entries:7d} {verdict:>7s} {plain:9.2f} {tight:10.2f} {warps:11.2f}{flag}")
    print(f"budget per plain check: {args.budget_ms:.0f} ms")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

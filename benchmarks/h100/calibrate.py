#!/usr/bin/env python3
"""Calibrate the H100 timing models against measured GEMMs; report predicted vs measured.

Reads the harness's JSON lines (``benchmarks/gemm_h100.py --jsonl FILE``), keeps the compiled
schedules at one shape (default 8192^3), and for each one compares:

* measured: SM cycles per CTA K tile = median time x SM clock x SMs / (CTAs x K tiles) (the clock
  is the NVML reading the harness stored after the timed launches, else the sustained 1.71 GHz);
* predicted: ``warpspecialized-gemm``: the agents timing model (pipeline_core.agents.timing) on
  the compiled plan; ``multistage-gemm``: the core timing model's steady state per K tile.

The agents machine's parameters are fitted by coordinate descent on the mean absolute relative
error over the warp-specialized variants; the mma.sync family gets one efficiency factor (the
median of measured / predicted).  Prints the table, the fit and Spearman's rank correlation, as
benchmarks/h100/GEMM_NOTES.md records them.  CPU only.

  python3 benchmarks/h100/calibrate.py benchmarks/results/gemm_h100_issue19.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

SMS = 132
#: compile even where the checker does not prove the schedule (--allow-unsafe)
ALLOW_UNSAFE = False
SUSTAINED_GHZ = 1.71

#: the search space of the agents machine (coordinate descent visits each list in turn)
SPACE = {
    "copy_latency": [200, 400, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000],
    "copy_bytes_per_cycle": [12, 16, 20, 24, 28, 32, 40, 48, 64, 96],
    "mma_efficiency": [round(0.50 + 0.02 * i, 2) for i in range(26)],
    "wake_cycles": [0, 25, 50, 100, 200, 400],
    "cta_overhead_cycles": [0, 1000, 2000, 4000, 8000, 16000, 32000],
}


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1  # ties share their mean rank
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def measured_cycles(rec: dict, bm: int, bn: int, bk: int) -> float:
    ghz = (rec.get("sm_clock_mhz") or SUSTAINED_GHZ * 1000) / 1000
    ctas = (rec["M"] // bm) * (rec["N"] // bn)
    return rec["median_ms"] * 1e-3 * ghz * 1e9 * SMS / (ctas * (rec["K"] // bk))


def ws_variants(records: list[dict]):
    from pipeline_core.api import compile_named
    from ws_gemm import SCHEDULE, WS_COMPILED, h100_host

    host = h100_host()
    table = dict((label, (params, stages)) for label, params, stages in WS_COMPILED)
    for rec in records:
        if rec["impl"] != "compiled-ws" or rec["config"] not in table:
            continue
        params, stages = table[rec["config"]]
        c = compile_named(SCHEDULE, target="h100", params=params,
                          target_args={"stages": str(stages)}, host=host,
                          allow_unsafe=ALLOW_UNSAFE, reference=False)
        p = c.params
        yield rec, c, measured_cycles(rec, p["BM"], p["BN"], p["BK"])


def multistage_variants(records: list[dict]):
    from gemm_h100 import COMPILED
    from pipeline_core.api import compile_named
    from pipeline_core.metrics import steady_state
    from ws_gemm import h100_host

    table = dict((label, (params, stages)) for label, params, stages in COMPILED)
    for rec in records:
        if rec["impl"] != "compiled-multistage" or rec["config"] not in table:
            continue
        params, stages = table[rec["config"]]
        c = compile_named("multistage-gemm", target="h100", params=params,
                          target_args={"stages": str(stages)}, host=h100_host())
        ss = steady_state(c)
        p = c.params
        yield rec, ss.cycles_per_iteration / stages, measured_cycles(rec, p["BM"], p["BN"], p["BK"])


def fit_agents(rows, start):
    from pipeline_core.agents.timing import simulate

    def error(machine):
        errs = []
        for rec, c, meas in rows:
            pred = simulate(c.plan, c.body, machine, rec["K"] // c.params["BK"]).cycles_per_tile
            errs.append(abs(pred - meas) / meas)
        return statistics.fmean(errs)

    best, best_err = start, error(start)
    for _ in range(3):
        for field, values in SPACE.items():
            for v in values:
                trial = attrs.evolve(best, **{field: v})
                e = error(trial)
                if e < best_err - 1e-9:
                    best, best_err = trial, e
    return best, best_err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl")
    ap.add_argument("--shape", default="8192x8192x8192")
    ap.add_argument("--allow-unsafe", action="store_true")
    ap.add_argument("--no-fit", action="store_true",
                    help="predict with the plugin's machine as it is (a held-out check)")
    args = ap.parse_args(argv)
    global ALLOW_UNSAFE
    ALLOW_UNSAFE = args.allow_unsafe
    m, n, k = (int(x) for x in args.shape.split("x"))
    records = [json.loads(line) for line in Path(args.jsonl).read_text().splitlines() if line.strip()]
    records = [r for r in records if (r["M"], r["N"], r["K"]) == (m, n, k) and r.get("median_ms")]
    from pipeline_core.agents.timing import simulate
    from pipeline_core_nvidia_h100.machine import H100_AGENT_MACHINE

    ws = list(ws_variants(records))
    if args.no_fit:
        machine, err = H100_AGENT_MACHINE, float("nan")
    else:
        machine, err = fit_agents(ws, H100_AGENT_MACHINE)
    ms = list(multistage_variants(records))
    factor = statistics.median(meas / pred for _, pred, meas in ms) if ms else 1.0
    rows = []
    for rec, c, meas in ws:
        pred = simulate(c.plan, c.body, machine, rec["K"] // c.params["BK"]).cycles_per_tile
        rows.append(("warpspecialized-gemm", rec["config"], pred, meas, rec["tflops"]))
    for rec, pred, meas in ms:
        rows.append(("multistage-gemm", rec["config"], pred * factor, meas, rec["tflops"]))
    print(f"| schedule | variant | predicted cycles / K tile | measured | error | TFLOPS |")
    print("|---|---|---|---|---|---|")
    for sched, label, pred, meas, tf in rows:
        print(f"| {sched} | {label} | {pred:.0f} | {meas:.0f} | {100 * (pred - meas) / meas:+.1f}% "
              f"| {tf} |")
    fields = ", ".join(f"{f}={getattr(machine, f)}" for f in SPACE)
    errors = [abs(r[2] - r[3]) / r[3] for r in rows if r[0][0] == "w"]
    how = "as shipped" if args.no_fit else "fitted"
    print(f"\nagents machine {how}: {fields}; mean |error| "
          f"{100 * statistics.fmean(errors) if errors else float('nan'):.1f}% over {len(ws)} variants")
    print(f"mma.sync efficiency factor (measured / model, median of {len(ms)}): {factor:.3f}")
    # ranks use whole-cycle predictions, the model's resolution: a fraction of a cycle from a
    # different count of sync steps must not order variants the model cannot tell apart
    for name, sel in (("all", rows), ("warpspecialized", [r for r in rows if r[0][0] == "w"]),
                      ("multistage", [r for r in rows if r[0][0] == "m"])):
        if len(sel) > 2:
            print(f"Spearman rank correlation, {name} ({len(sel)} variants): "
                  f"{spearman([round(r[2]) for r in sel], [r[3] for r in sel]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build and run the H100 microbenchmarks; write benchmarks/results/h100_microbench.json.

    python3 benchmarks/h100/run_microbench.py [--out DIR] [--groups clock cp_async ...]
    python3 benchmarks/h100/run_microbench.py --sass-only     # build + SASS check, no GPU

Builds microbench.cu with nvcc for sm_90a, disassembles it (cuobjdump or nvdisasm, when
either is on PATH) to show that the LDGSTS / LDSM / HMMA instructions are there, runs it,
samples the SM clock with nvidia-smi while it runs, and converts the cycle counts the kernels
report into nanoseconds and throughputs. What each number means: benchmarks/h100/README.md.
Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "microbench.cu"
DEFAULT_OUT = HERE.parent / "results"
RESULT_NAME = "h100_microbench.json"
NVCC_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17"]
GROUPS = ("clock", "cp_async", "ldmatrix", "mma", "sync")
MMA_FLOPS = 2 * 16 * 8 * 16  # one m16n8k16
# A kernel's own clock reading is used when it ran at least this long (globaltimer ticks
# are coarse); shorter kernels are converted at the light-load clock of the probe.
MIN_NS_FOR_OWN_CLOCK = 200_000

# SASS instructions each kernel must hold, so that a result cannot come from deleted work.
SASS_EXPECT = {
    "k_cp_async_latency": {"LDGSTS": 1, "LDGDEPBAR": 1, "DEPBAR": 1},
    "k_cp_async_bytes": {"LDGSTS": 1, "LDGDEPBAR": 1, "DEPBAR": 1},
    "k_cp_async_stream<2>": {"LDGSTS": 2, "LDGDEPBAR": 2, "DEPBAR": 1},
    "k_cp_async_stream<3>": {"LDGSTS": 2, "LDGDEPBAR": 2, "DEPBAR": 1},
    "k_cp_async_stream<4>": {"LDGSTS": 2, "LDGDEPBAR": 2, "DEPBAR": 1},
    "k_ldsm_latency": {"LDSM": 16},
    "k_ldsm_throughput": {"LDSM": 24},
    "k_mma<1,1>": {"HMMA": 2},
    "k_mma<1,2>": {"HMMA": 4},
    "k_mma<2,2>": {"HMMA": 8},
    "k_mma<2,4>": {"HMMA": 16},
    "k_mma<4,4>": {"HMMA": 32},
    "k_bar_sync": {"BAR": 16},
    "k_wait_empty<0>": {"DEPBAR": 16},
    "k_wait_empty<1>": {"DEPBAR": 16, "LDGDEPBAR": 16},
    "k_wait_empty<2>": {"DEPBAR": 16},
}
SASS_COUNTED = ("LDGSTS", "LDGDEPBAR", "DEPBAR", "LDSM", "HMMA", "BAR", "LDL", "STL")


def fail(msg: str) -> None:
    print(f"run_microbench: {msg}", file=sys.stderr)
    sys.exit(1)


# --- build and SASS ----------------------------------------------------------------------------
def build(nvcc: str, build_dir: Path) -> tuple[Path, str]:
    exe = build_dir / "microbench"
    cmd = [nvcc, *NVCC_FLAGS, "-Xptxas", "-v", "-o", str(exe), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"nvcc failed ({' '.join(cmd)}):\n{proc.stderr}")
    return exe, proc.stderr


def ptxas_report(text: str) -> dict[str, dict[str, int]]:
    """Registers and spill bytes per kernel from `-Xptxas -v`."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = pretty_kernel(m.group(1))
            out[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current]["spill_store_bytes"] = int(m.group(1))
            out[current]["spill_load_bytes"] = int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
    return out


def pretty_kernel(mangled: str) -> str:
    """_Z5k_mmaILi2ELi4EEvPKj... -> k_mma<2,4> (enough of the Itanium mangling for ours)."""
    m = re.match(r"_Z(\d+)", mangled)
    if not m:
        return mangled
    n = int(m.group(1))
    start = m.end()
    name = mangled[start:start + n]
    rest = mangled[start + n:]
    if rest.startswith("I"):
        args = re.match(r"I((?:Li\d+E)+)E", rest)
        if args:
            name += "<" + ",".join(re.findall(r"Li(\d+)E", args.group(1))) + ">"
    return name


def disassemble(exe: Path, build_dir: Path, nvcc: str, nvdisasm: str | None) -> str | None:
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        proc = subprocess.run([cuobjdump, "-sass", str(exe)], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
    tool = nvdisasm or shutil.which("nvdisasm")
    if tool:
        cubin = build_dir / "microbench.cubin"
        subprocess.run([nvcc, *NVCC_FLAGS, "-cubin", "-o", str(cubin), str(SOURCE)], check=True,
                       capture_output=True)
        proc = subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
    return None


def sass_counts(sass: str) -> dict[str, dict[str, int]]:
    """Opcode counts per kernel, for the opcodes in SASS_COUNTED."""
    parts = re.split(r"(?:Function : |^\.text\.)(_Z\w+)", sass, flags=re.M)
    counts: dict[str, dict[str, int]] = {}
    for i in range(1, len(parts) - 1, 2):
        name = pretty_kernel(parts[i])
        body = parts[i + 1]
        c = {op: 0 for op in SASS_COUNTED}
        for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)", body):
            if m.group(1) in c:
                c[m.group(1)] += 1
        prev = counts.get(name)
        counts[name] = c if prev is None else {k: prev[k] + c[k] for k in c}
    return counts


def sass_problems(counts: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for kernel, c in sorted(counts.items()):
        if c["LDL"] or c["STL"]:
            problems.append(f"{kernel}: local-memory traffic (LDL/STL) in SASS")
        base = kernel.split("<")[0]
        want = SASS_EXPECT.get(kernel) or SASS_EXPECT.get(base) or {}
        for op, n in want.items():
            if c[op] < n:
                problems.append(f"{kernel}: {c[op]} {op} in SASS, expected at least {n}")
    for kernel in SASS_EXPECT:
        if kernel not in counts and not any(k.split("<")[0] == kernel for k in counts):
            problems.append(f"{kernel}: not found in SASS")
    return problems


# --- clocks ------------------------------------------------------------------------------------
SMI_FIELDS = "name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu"


def smi_snapshot() -> dict[str, str] | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    proc = subprocess.run([smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS.split(","), values))


class ClockSampler:
    """nvidia-smi sampling the SM clock every 100 ms while the benchmark runs."""

    def __init__(self, log: Path):
        self.proc = None
        self.log = log
        smi = shutil.which("nvidia-smi")
        if smi:
            self.fh = open(log, "w")
            self.proc = subprocess.Popen(
                [smi, "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=self.fh, stderr=subprocess.DEVNULL)

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.fh.close()
        clocks, power = [], []
        for line in self.log.read_text().splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) < 4:
                continue
            try:
                clocks.append(float(cols[1]))
                power.append(float(cols[2]))
            except ValueError:
                continue
        if not clocks:
            return None
        return {"samples": len(clocks), "sm_mhz_min": min(clocks),
                "sm_mhz_median": statistics.median(clocks), "sm_mhz_max": max(clocks),
                "power_w_max": max(power)}


# --- run and derive ----------------------------------------------------------------------------
def parse_rows(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if line.startswith("@@ "):
            try:
                rows.append(json.loads(line[3:]))
            except json.JSONDecodeError as e:
                fail(f"unparsable microbench line ({e}): {line}")
    return rows


def run_binary(exe: Path, groups: list[str], log: Path) -> list[dict]:
    t = time.time()
    proc = subprocess.run([str(exe), *groups], capture_output=True, text=True)
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        fail(f"microbench exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    rows = parse_rows(proc.stdout)
    print(f"microbench ran in {time.time() - t:.1f} s, {len(rows)} records")
    return rows


def ns(cycles: float, mhz: float) -> float:
    return cycles * 1000.0 / mhz


def fit_latency_bandwidth(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares cycles = a + bytes / b; returns (a cycles, b bytes per cycle)."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, 1.0 / slope


def derive(rows: list[dict]) -> tuple[dict, list[dict]]:
    device = next((r["params"] for r in rows if r["name"] == "device"), {})
    sms = int(device.get("sms", 132))
    probes = [r for r in rows if r["name"] == "clock_probe"]
    light = [1000.0 * r["elapsed_clk"] / r["elapsed_gt_ns"] for r in probes]
    max_mhz = device.get("max_sm_clock_khz", 1980000) / 1000.0
    # %globaltimer drifts by about 1% against the SM clock (probes read up to 2010 MHz on a
    # 1980 MHz part), so a probe above the maximum clock is taken as the maximum clock
    mhz_light = min(light[0], max_mhz) if light else max_mhz
    clock_overhead = next((r["cycles"] for r in rows if r["name"] == "clock64_overhead"), 0.0)

    out = []
    for r in rows:
        name = r["name"]
        if name in ("device", "checksum", "clock_probe"):
            continue
        m = dict(name=name, params=r["params"])
        mhz, source = mhz_light, "clock_probe (1 warp, light load)"
        long_enough = max(r.get("elapsed_gt_ns", 0), r.get("event_ms", 0) * 1e6) >= MIN_NS_FOR_OWN_CLOCK
        if r.get("mhz_in_kernel") and long_enough:
            mhz, source = r["mhz_in_kernel"], "this kernel (clock64 / globaltimer)"
        elif r.get("elapsed_gt_ns", 0) >= MIN_NS_FOR_OWN_CLOCK:
            mhz, source = 1000.0 * r["elapsed_clk"] / r["elapsed_gt_ns"], "this kernel (clock64 / globaltimer)"
        m["cycles"] = r["cycles"]
        m["ns"] = ns(r["cycles"], mhz)
        m["clock_mhz"] = round(mhz, 1)
        m["clock_source"] = source
        d: dict = {}
        if "cycles_stats" in r:
            m["cycles_stats"] = r["cycles_stats"]
        if name == "cp_async_latency":
            d["cycles_minus_clock_read"] = r["cycles"] - clock_overhead
        elif name == "cp_async_bytes_in_flight":
            b = r["params"]["bytes_per_cta"]
            d["bytes_per_cycle_per_sm"] = b / r["cycles"]
            d["gb_per_s_per_sm"] = b / m["ns"]
            d["issue_cycles_thread0"] = r["issue_cycles_thread0"]
            d["distinct_sms"] = r["distinct_sms"]
            if r["params"]["ctas"] > 1:
                slow_ns = ns(r["slowest_cta_cycles_median"], mhz)
                d["gpu_gb_per_s_slowest_cta"] = b * r["params"]["ctas"] / slow_ns
        elif name == "cp_async_stream":
            d["bytes_per_cycle_per_sm"] = r["bytes_per_cta"] / r["elapsed_clk"]
            d["stage_interval_cycles"] = r["cycles"]
            d["gpu_gb_per_s_events"] = r["bytes_per_cta"] * r["params"]["ctas"] / (r["event_ms"] * 1e6)
            d["distinct_sms"] = r["distinct_sms"]
        elif name == "ldmatrix_latency":
            d["note"] = "chain = LDSM + one IADD3"
        elif name == "ldmatrix_throughput":
            per_sm = r["cycles_per_instr_per_sm"]
            d["cycles_per_instr_per_sm"] = per_sm
            d["instr_per_cycle_per_sm"] = 1.0 / per_sm
            d["smem_bytes_per_cycle_per_sm"] = r["bytes"] / r["elapsed_clk"]
        elif name.startswith("mma_"):
            per_sm = r["cycles_per_mma_per_sm"]
            flops_clk = MMA_FLOPS / per_sm
            d["cycles_per_mma_per_sm"] = per_sm
            d["mma_per_cycle_per_sm"] = 1.0 / per_sm
            d["flops_per_cycle_per_sm"] = flops_clk
            d["tflops_per_sm"] = flops_clk * mhz * 1e6 / 1e12
            d["tflops_gpu_at_clock"] = d["tflops_per_sm"] * sms
            if r["params"]["ctas"] > 1 and r.get("event_ms"):
                d["tflops_gpu_events"] = r["flops"] / (r["event_ms"] * 1e-3) / 1e12
                d["event_ms"] = r["event_ms"]
            d["distinct_sms"] = r["distinct_sms"]
        m["derived"] = d
        out.append(m)

    # latency + bytes / bandwidth fits of the bytes-in-flight sweep, one per (source, threads, ctas)
    groups: dict[tuple, list] = {}
    for m in out:
        if m["name"] == "cp_async_bytes_in_flight":
            p = m["params"]
            groups.setdefault((p["source"], p["threads"], p["ctas"]), []).append(m)
    for (source, threads, ctas), ms in sorted(groups.items()):
        pts = [(x["params"]["bytes_per_cta"], x["cycles"]) for x in ms
               if x["params"]["bytes_per_cta"] >= 8192]
        if len(pts) < 3:
            continue
        a, b = fit_latency_bandwidth(pts)
        mhz = ms[0]["clock_mhz"]
        out.append(dict(
            name="cp_async_model", params=dict(source=source, threads=threads, ctas=ctas,
                                               fit_bytes=[p[0] for p in pts]),
            cycles=a, ns=ns(a, mhz), clock_mhz=mhz, clock_source=ms[0]["clock_source"],
            derived=dict(latency_cycles=a, bytes_per_cycle_per_sm=b,
                         gb_per_s_per_sm=b * mhz / 1000.0,
                         gb_per_s_gpu=b * mhz / 1000.0 * ctas,
                         formula="cycles(bytes) = latency_cycles + bytes / bytes_per_cycle_per_sm")))

    loaded = [m["clock_mhz"] for m in out if m["name"].startswith("mma_throughput")
              and m["params"]["ctas"] > 1]
    sustained = [m["clock_mhz"] for m in out if m["name"] == "mma_throughput_sustained"]
    clocks = dict(
        max_sm_clock_mhz=device.get("max_sm_clock_khz", 0) / 1000.0,
        light_load_mhz=[round(x, 1) for x in light],
        light_load_mhz_used=round(mhz_light, 1),
        full_mma_load_mhz=[round(x, 1) for x in loaded],
        after_3s_full_mma_load_mhz=[round(x, 1) for x in sustained],
        clock64_read_overhead_cycles=clock_overhead)
    return dict(device=device, clocks=clocks, sms=sms), out


def fmt_params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items() if k != "fit_bytes")


def headline(m: dict) -> str:
    d = m.get("derived", {})
    n = m["name"]
    if n == "cp_async_bytes_in_flight":
        s = f"{d['bytes_per_cycle_per_sm']:.1f} B/clk/SM"
        if "gpu_gb_per_s_slowest_cta" in d:
            s += f", GPU {d['gpu_gb_per_s_slowest_cta']:.0f} GB/s"
        return s
    if n == "cp_async_model":
        return (f"lat {d['latency_cycles']:.0f} clk + bytes/{d['bytes_per_cycle_per_sm']:.1f} "
                f"B/clk/SM ({d['gb_per_s_gpu']:.0f} GB/s over {m['params']['ctas']} SM)")
    if n == "ldmatrix_throughput":
        return (f"{d['cycles_per_instr_per_sm']:.2f} clk/instr/SM, "
                f"{d['smem_bytes_per_cycle_per_sm']:.0f} B/clk/SM")
    if n == "cp_async_stream":
        return (f"{d['bytes_per_cycle_per_sm']:.1f} B/clk/SM, {d['stage_interval_cycles']:.0f} "
                f"clk/stage, GPU {d['gpu_gb_per_s_events']:.0f} GB/s")
    if n.startswith("mma_"):
        s = (f"{d['cycles_per_mma_per_sm']:.2f} clk/mma/SM, {d['tflops_per_sm']:.2f} TF/SM, "
             f"{d['tflops_gpu_at_clock']:.0f} TF/GPU@clk")
        if "tflops_gpu_events" in d:
            s += f", events {d['tflops_gpu_events']:.0f} TF"
        return s
    return ""


def print_table(meta: dict, ms: list[dict]) -> None:
    c = meta["clocks"]
    print(f"\n{meta['device'].get('gpu', '?')}: {meta['sms']} SMs, max SM clock "
          f"{c['max_sm_clock_mhz']:.0f} MHz, light-load {c['light_load_mhz']} MHz, "
          f"full mma load {c['full_mma_load_mhz']} MHz")
    print(f"{'measurement':<26} {'parameters':<66} {'cycles':>9} {'ns':>8}  derived")
    for m in ms:
        if m["name"] == "cp_async_bytes_in_flight" and m["params"]["bytes_per_cta"] not in (
                4096, 32768, 196608):
            continue  # the full sweep is in the JSON
        print(f"{m['name']:<26} {fmt_params(m['params'])[:66]:<66} {m['cycles']:>9.2f} "
              f"{m['ns']:>8.2f}  {headline(m)}")


def rederive(src: Path, out: Path) -> int:
    log, old = src / "h100_microbench_raw.log", src / RESULT_NAME
    for f in (log, old):
        if not f.exists():
            fail(f"--rederive: {f} not found")
    doc = json.loads(old.read_text())
    meta, ms = derive(parse_rows(log.read_text()))
    smi = {k: v for k, v in doc["clocks"].items() if k.startswith("nvidia_smi")}
    doc.update(device=meta["device"], clocks=dict(meta["clocks"], **smi), measurements=ms)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULT_NAME
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print_table(meta, ms)
    print(f"\nwrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"directory for {RESULT_NAME} and the logs (default: {DEFAULT_OUT})")
    ap.add_argument("--groups", nargs="*", choices=GROUPS, default=[],
                    help="run only these groups (default: all)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--nvdisasm", default=None, help="nvdisasm to use when cuobjdump is absent")
    ap.add_argument("--sass-only", action="store_true",
                    help="build and check the SASS only (no GPU needed)")
    ap.add_argument("--rederive", type=Path, metavar="DIR",
                    help="no build or run: recompute the measurements from DIR's raw log and "
                         f"{RESULT_NAME} (after a change to the derivation), write to --out")
    args = ap.parse_args(argv)

    if args.rederive:
        return rederive(args.rederive, args.out)

    if not shutil.which(args.nvcc) and not Path(args.nvcc).exists():
        fail(f"--nvcc: '{args.nvcc}' not found")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="h100mb-") as tmp:
        build_dir = Path(tmp)
        exe, ptxas_log = build(args.nvcc, build_dir)
        regs = ptxas_report(ptxas_log)
        sass = disassemble(exe, build_dir, args.nvcc, args.nvdisasm)
        counts = sass_counts(sass) if sass else {}
        problems = sass_problems(counts) if sass else ["no cuobjdump or nvdisasm: SASS not checked"]
        for p in problems:
            print(f"SASS check: {p}")
        if sass:
            print(f"SASS check: {len(counts)} kernels, "
                  f"{'all expected instructions present' if not problems else 'PROBLEMS above'}")
        if args.sass_only:
            for k, c in sorted(counts.items()):
                print(f"  {k:<28} " + " ".join(f"{op}={n}" for op, n in c.items() if n)
                      + f"  regs={regs.get(k, {}).get('registers')}")
            return 1 if problems else 0

        before = smi_snapshot()
        sampler = ClockSampler(args.out / "h100_microbench_smi.csv")
        rows = run_binary(exe, args.groups, args.out / "h100_microbench_raw.log")
        sampled = sampler.stop()
        after = smi_snapshot()

    meta, ms = derive(rows)
    checksum = next((r.get("sink") for r in rows if r["name"] == "checksum"), None)
    doc = dict(
        about="H100 microbenchmarks for the h100 target's cost model; see benchmarks/h100/README.md",
        date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        device=meta["device"], clocks=dict(meta["clocks"], nvidia_smi_before=before,
                                           nvidia_smi_after=after, nvidia_smi_sampled=sampled),
        build=dict(nvcc_flags=NVCC_FLAGS, ptxas=regs, sass_counts=counts, sass_problems=problems),
        checksum=checksum, measurements=ms)
    path = args.out / RESULT_NAME
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print_table(meta, ms)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

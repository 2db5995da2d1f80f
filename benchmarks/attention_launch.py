"""The attention call where its host side matters (S=1024; docs/guide/attention.md, "The launch
path"): the call's own kernel only, against the SDPA backends, with the host's time to enqueue.

  python3 benchmarks/attention_launch.py [--anchors ../shared/tools/gemm_anchors.py] [--rounds 7]

1. Correctness first (METHOD.md): per configuration (head dim 128 and 64, causal or not, S=1024,
   B = 16384/S, H = 2048/D, bf16) and one tail case (Sq=1000, Sk=777), fresh random inputs, the
   output NaN-poisoned (the freed NaN block the call's allocation reuses), against an fp32
   reference.
2. Timing: the eager call, the call through its custom op (``torch.ops.pipeline_core.attention``,
   the path torch.compile takes) and the peers of ``attention_peers()``, CUDA-event medians
   after warm-up, interleaved rounds with the order rotated, per-round ratios; and
   ``host_ms_per_call``: the host's time to enqueue 50 calls back to back, divided by 50 (the
   GPU is kept busy ahead of them, so the host's time is what is measured).
One JSON line per result on stdout (and in --out/results.jsonl).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_timing import events_ms  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)

LINES: list[dict] = []
CONFIGS = ((128, False), (64, False), (128, True), (64, True))


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def reference(torch, q, k, v, causal):
    s = q.float() @ k.float().transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, device=q.device, dtype=torch.bool).triu(1),
                          float("-inf"))
    return torch.softmax(s, -1) @ v.float()


def check(torch, attention, b, h, sq, sk, d, causal) -> dict:
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, h, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    poison = torch.full((b, h, sq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    del poison  # the call's output reuses this freed NaN block
    out = attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    ref = reference(torch, q, k, v, causal)
    err = float((torch.nan_to_num(out.float(), nan=1e6) - ref).abs().max())
    return {"kind": "correct", "shape": [b, h, sq, sk, d], "causal": causal, "err": err,
            "nan": bool(torch.isnan(out).any()), "ok": err < 2e-2}


def host_ms(torch, fn, calls: int = 50) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # keep the GPU busy: the host's enqueue time alone is timed
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) * 1e3 / calls
    torch.cuda.synchronize()
    return host


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--out", default=None, help="folder for results.jsonl")
    args = ap.parse_args(argv)
    import torch

    from pipeline_core_schedules_attention import attention
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    peers = {n: f for n, f in load_anchors(args.anchors).attention_peers().items()
             if n != "sdpa-efficient"}
    torch.manual_seed(0)
    s = args.seq
    checks = [check(torch, attention, 16384 // s, 2048 // d, s, s, d, c) for d, c in CONFIGS]
    checks += [check(torch, attention, 2, 4, 1000, 777, d, c) for d in (64, 128) for c in (False, True)]
    for r in checks:
        emit(r)
    if not all(r["ok"] and not r["nan"] for r in checks):
        emit({"kind": "stop", "why": "a correctness case failed: no timing"})
        return 1
    from pipeline_core_schedules_attention.call import CALL
    op = CALL.ops().attention.default  # registered on first use
    for d, causal in CONFIGS:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        flop = 4 * b * h * s * s * d // (2 if causal else 1)
        fns = {"ours": lambda: attention(q, k, v, causal=causal),
               "ours-op": lambda: op(q, k, v, "top_left" if causal else "none", None, False),
               **{n: (lambda f=f: f(q, k, v, causal)) for n, f in peers.items()}}
        names = list(fns)
        times: dict[str, list[float]] = {n: [] for n in names}
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for n in order:
                times[n].append(events_ms(torch, fns[n], reps=10))
        rec: dict = {"kind": "timing", "head_dim": d, "causal": causal, "seq": s, "batch": b,
                     "heads": h, "rounds": args.rounds}
        for n in names:
            ms = statistics.median(times[n])
            rec[n] = {"ms": round(ms, 4), "tflops": round(flop / ms / 1e9, 1),
                      "host_ms_per_call": round(host_ms(torch, fns[n]), 4)}
        for p in peers:
            rec[f"ours/{p}"] = [round(times[p][i] / times["ours"][i], 3)
                                for i in range(args.rounds)]
        emit(rec)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    for r in LINES:
        if r["kind"] == "timing":
            print(f"D={r['head_dim']} causal={r['causal']} S={r['seq']}: ours "
                  f"{r['ours']['tflops']} TF (host {r['ours']['host_ms_per_call']} ms), "
                  + ", ".join(f"{p} {r[p]['tflops']} TF x{statistics.median(r[f'ours/{p}']):.3f}"
                              for p in peers))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``pipeline_core_schedules_attention.attention`` on the GPU: correctness, sanitizers, timing.

  python3 benchmarks/attention_call.py [--phase all|correct|small|time|strides|strides-time]
                                       [--anchors FILE] [--out DIR] [--causal]

1. Correctness (METHOD.md): cases over (B, H, Sq, Sk, D, dtype), S in {1, 7, 127, 128, 1000,
   4096} with query and key lengths that differ, fresh random inputs each, the output's memory
   NaN-poisoned first (the call allocates it: a freed NaN-filled block of its size is what the
   caching allocator hands back), against an fp32 torch reference softmax(Q.K^T * scale).V; a
   case passes when its error is at most 1.5x sdpa-flash's against the same reference (plus
   1e-3 of slack for cases where both are near 0).
2. ``--phase small``: one small case with tails (Sq 100, Sk 77), the run compute-sanitizer's
   racecheck and synccheck wrap.
3. Timing against the anchors' SDPA peers (sdpa-flash, sdpa-cudnn) in this process: B*S = 16k
   tokens, H = 2048 / D, CUDA-event medians after warm-up, interleaved rounds with the order
   rotated, per-round ratios; ``VARIANTS``: each overlap on or off (the ablation).
``--causal``: every case and timing with ``causal=True`` (torch's ``is_causal``: key k of query
row r kept when k <= r, aligned top-left also when Sq != Sk); the reference masks the scores,
the peers run ``is_causal=True``, and TFLOPS count the kept half of the square.
4. ``--phase strides`` (issue 37): every layout of attention_layouts.LAYOUTS (contiguous, a
   [B, S, H, D] buffer's transposed view, every other head, a stride TMA cannot take: the copy
   path, a mix) x D 64 / 128 x bf16 / fp16 x causal off / top-left / bottom-right, with tails
   (S 77 and 1000, Sq != Sk in half) and grouped-query heads in half: the NaN-poisoned output
   against the fp32 reference (attention_checks.reference: GQA, both alignments; a row with no
   key exactly 0) within 1.5x the first SDPA backend's error on the same strided inputs, and
   the output's layout q's (attention_layouts.same_layout).  ``--phase strides-time``: for
   each of ``--configs``, a [B, S, H, D] view called in place against contiguous inputs (should
   be equal) and against ``.contiguous()`` of each then the call (what the refusal asked for).
``--variants all`` (or names of VARIANTS): the correctness cases for each variant timed, not only
the call's own; ``--one VARIANT:DxS``: two launches of one variant, for ``ncu --launch-skip 1``.
Each timing line also holds ``batched_ms`` (20 calls between two events) and
``host_ms_per_call`` (the host's time to enqueue one), which show a launch-bound call.
Every result is one JSON line on stdout (and in --out/attention.jsonl).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
import attention_layouts as layouts  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)

SEQS = (1, 7, 127, 128, 1000, 4096)
#: the timed kernels: both overlaps of the schedule, each on or off (the ablation); the call
#: runs one of them per head dim (call.CALL_OVERLAPS)
VARIANTS = {"ours-intra-pingpong": {"intra_overlap": "true", "pingpong": "true"},
            "ours-intra": {"intra_overlap": "true", "pingpong": "false"},
            "ours-pingpong": {"intra_overlap": "false", "pingpong": "true"},
            "ours-neither": {"intra_overlap": "false", "pingpong": "false"},
            # the call's overlap on each tile it picks from (one of each pair is the call's own
            # tile, call.CALL_TILES): D=64 on 2 or 3 consumer warp groups, D=128 on KV blocks
            # of 128 or 176 keys
            "ours-intra-c2": {"intra_overlap": "true", "pingpong": "false", "block_m": "128",
                              "consumers": "2", "consumer_registers": "240"},
            "ours-intra-c3": {"intra_overlap": "true", "pingpong": "false", "block_m": "192",
                              "consumers": "3", "consumer_registers": "160", "block_n": "128"},
            "ours-intra-bn128": {"intra_overlap": "true", "pingpong": "false", "block_m": "128",
                                 "consumers": "2", "block_n": "128"},
            "ours-intra-bn176": {"intra_overlap": "true", "pingpong": "false", "block_m": "128",
                                 "consumers": "2", "block_n": "176"}}
#: the head dims a variant is run at (absent: both)
VARIANT_DIMS = {"ours-intra-c2": (64,), "ours-intra-c3": (64,), "ours-intra-bn128": (128,),
                "ours-intra-bn176": (128,)}
LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def reference(torch, q, k, v, scale, causal=False):
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:  # torch's is_causal: tril of the [Sq, Sk] ones, top-left aligned
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v.float()


def rel_err(torch, out, ref) -> float:
    diff = torch.nan_to_num(out.float(), nan=1e6) - ref
    return float(diff.norm() / ref.norm().clamp_min(1e-30))


def run_case(torch, call, peers, b, h, sq, sk, d, dtype, causal=False) -> dict:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    scale = d ** -0.5
    ref = reference(torch, q, k, v, scale, causal)
    poison = torch.full_like(q, float("nan"))
    del poison  # the call's output reuses this freed NaN block
    out = call.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    err = rel_err(torch, out, ref)
    try:
        flash = peers["sdpa-flash"](q, k, v, causal) if peers else None
    except RuntimeError:  # a shape the flash backend refuses: the fixed bound below
        flash = None
    ferr = rel_err(torch, flash, ref) if flash is not None else None
    ok = bool(err == err and (ferr is None and err < 2e-2 or ferr is not None
                              and err <= 1.5 * ferr + 1e-3))
    return {"kind": "correct", "B": b, "H": h, "Sq": sq, "Sk": sk, "D": d, "dtype": dtype,
            "causal": causal,
            "err": err, "flash_err": ferr, "nan": bool(torch.isnan(out).any()), "ok": ok}


def correctness(torch, call, peers, rng, causal=False, random_cases=14, variant="",
                dims=(64, 128)) -> None:
    cases = [(1, 1, 1, 1), (1, 2, 7, 7), (2, 3, 127, 128), (1, 4, 128, 127), (2, 2, 1000, 1000),
             (1, 2, 1, 4096), (1, 2, 4096, 7), (1, 1, 4096, 4096)]
    cases += [(rng.choice((1, 2)), rng.choice((1, 2, 3)), rng.choice(SEQS), rng.choice(SEQS))
              for _ in range(random_cases)]
    for d in dims:
        for dtype in ("bf16", "fp16"):
            for b, h, sq, sk in cases:
                rec = run_case(torch, call, peers, b, h, sq, sk, d, dtype, causal)
                emit({**rec, "variant": variant} if variant else rec)


def strided_case(torch, call, case) -> dict:
    """One layout's case: the output against the fp32 reference, the first SDPA backend that
    takes the same strided inputs as the bound, the output's layout q's."""
    from attention_checks import judge, reference

    kind, b, hq, hkv, sq, sk, d, dtype, causal = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    lq, lk, lv, _ = layouts.operand_layouts(kind)
    q = layouts.tensor(torch, b, hq, sq, d, dt, lq)
    k = layouts.tensor(torch, b, hkv, sk, d, dt, lk)
    v = layouts.tensor(torch, b, hkv, sk, d, dt, lv)
    ref, empty = reference(torch, q, k, v, d ** -0.5, causal)
    poison = torch.full((q.numel(),), float("nan"), device="cuda", dtype=dt)
    del poison  # the call's output (q's numel, in q's layout) reuses this freed NaN block
    out = call.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    rec = {"kind": "strided", "layout": kind, "B": b, "Hq": hq, "Hkv": hkv, "Sq": sq, "Sk": sk,
           "D": d, "dtype": dtype, "causal": causal, "q_stride": list(q.stride()),
           "out_stride": list(out.stride()), "layout_ok": layouts.same_layout(out, q),
           **judge(torch, out, q, k, v, ref, empty, causal, slack=1e-3)}
    rec["ok"] = bool(rec["ok"] and rec["layout_ok"] and not rec["nan"])
    return rec


def strided(torch, call) -> None:
    done = layouts.run_all(layouts.strided_cases(), lambda c: strided_case(torch, call, c), emit,
                           "strided")
    emit({"kind": "strided-summary", "cases": len(done), "failed": sum(not r["ok"] for r in done),
          "layouts": sorted({r.get("layout", "?") for r in done}),
          "max_err": max((r["err"] for r in done if "err" in r), default=None)})


def strided_timing(torch, call, rounds: int, configs, causal=False) -> None:
    """A [B, S, H, D] buffer's transposed view called in place, against contiguous inputs of
    the same values (the kernel's own speed: should be equal) and against ``.contiguous()`` of
    each then the call (the copy the refusal asked for before issue 37)."""
    for d, s in configs:
        b, h = 16384 // s, 2048 // d
        bq, bk, bv = (layouts.tensor(torch, b, h, s, d, torch.bfloat16, "bshd")
                      for _ in range(3))
        cq, ck, cv = (t.contiguous() for t in (bq, bk, bv))
        fns = {"bshd-in-place": lambda: call.attention(bq, bk, bv, causal=causal),
               "contiguous": lambda: call.attention(cq, ck, cv, causal=causal),
               "bshd-contiguous-then-call": lambda: call.attention(
                   bq.contiguous(), bk.contiguous(), bv.contiguous(), causal=causal)}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        per = interleaved(torch, fns, rounds, 10)
        for n in fns:
            emit({"kind": "strided-time", "name": n, "D": d, "S": s, "B": b, "H": h,
                  "causal": causal, "ms": statistics.median(per[n]),
                  "ratio_vs_contiguous": ratios(per, n, "contiguous"),
                  "device": torch.cuda.get_device_name()})


@contextlib.contextmanager
def params_over(call, params: dict):
    """``params`` over the call's own choice (``call.CALL_PARAMS``) for the block, the call's
    own restored after."""
    base = dict(call.CALL_PARAMS)
    call.CALL_PARAMS.update(params)
    try:
        yield
    finally:
        call.CALL_PARAMS.clear()
        call.CALL_PARAMS.update(base)


def each_variant(call, names):
    """Yield each named VARIANTS entry with the call compiling it (CALL_PARAMS wins over the
    call's own CALL_OVERLAPS), the call's own choice restored after."""
    for name in names:
        call.CALL.kernels.clear()
        try:
            with params_over(call, VARIANTS[name]):
                yield name
        finally:
            call.CALL.kernels.clear()


def with_kernels(mod, kernels: dict, q, k, v, causal):
    """A call of ``mod.attention`` that runs ``kernels`` (put in the call's kernel slots first),
    for timing one built variant against another through the call's own launch path."""
    def run():
        mod.CALL.kernels.clear()
        mod.CALL.kernels.update(kernels)
        return mod.attention(q, k, v, causal=causal)
    return run


def timing(torch, call, peers, rounds: int, configs, causal=False) -> None:
    from pipeline_core.plugin_api import ProgramError

    import pipeline_core_schedules_attention.call as mod

    for d, s in configs:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flop = 4 * b * h * s * s * d // (2 if causal else 1)
        # each ablation kernel is built (and cached) once, then timed through its own entry
        built = {}
        for label in each_variant(mod, [n for n in VARIANTS if d in VARIANT_DIMS.get(n, (d,))]):
            try:
                mod.attention(q, k, v, causal=causal)
            except ProgramError as e:  # a variant the call's tile has no room for: one line
                emit({"kind": "refused", "name": label, "D": d, "S": s, "causal": causal,
                      "why": str(e).splitlines()[0]})
                continue
            built[label] = dict(mod.CALL.kernels)

        fns = {**{n: with_kernels(mod, kern, q, k, v, causal) for n, kern in built.items()},
               **{n: (lambda f=f: f(q, k, v, causal)) for n, f in peers.items() if n != "sdpa-efficient"}}
        for fn in fns.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        names = list(fns)
        per = interleaved(torch, fns, rounds, 10)
        # the launch cost: 20 calls back to back between two events (the GPU's time per call
        # when the host keeps ahead), and the host's time to enqueue them
        batched, host = {}, {}
        for n in names:
            a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            t0 = time.perf_counter()
            for _ in range(20):
                fns[n]()
            host[n] = (time.perf_counter() - t0) * 1e3 / 20
            e.record()
            torch.cuda.synchronize()
            batched[n] = a.elapsed_time(e) / 20
        for n in names:
            ms = statistics.median(per[n])
            rec = {"kind": "time", "name": n, "D": d, "S": s, "B": b, "H": h, "causal": causal,
                   "dtype": "bf16", "ms": ms, "tflops": flop / ms / 1e9,
                   "batched_ms": batched[n], "host_ms_per_call": host[n],
                   "device": torch.cuda.get_device_name()}
            if n in VARIANTS:  # the call's own choice (call_params) or an ablation of it
                own = {**mod.call_params(d, causal, short=s <= mod.SHORT_KEYS),
                       "stages": str(mod.call_stages(d, causal, s <= mod.SHORT_KEYS))}
                rec["call"] = all(own.get(k) == v for k, v in VARIANTS[n].items())
                rec["params"] = {**own, **VARIANTS[n]}
            for peer in ("sdpa-flash", "sdpa-cudnn"):
                if peer in per and n.startswith("ours"):
                    rec[f"ratio_vs_{peer}"] = ratios(per, n, peer)
            emit(rec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default="all",
                    choices=("all", "correct", "small", "time", "strides", "strides-time"))
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--causal", action="store_true", help="causal=True (torch's is_causal)")
    ap.add_argument("--configs", default="128x4096,64x4096,128x1024",
                    help="timed (head dim)x(S) pairs, comma-separated")
    ap.add_argument("--variants", default="",
                    help="check correctness of these VARIANTS (comma-separated, 'all') instead "
                         "of the call's own choice")
    ap.add_argument("--random-cases", type=int, default=14)
    ap.add_argument("--one", default="",
                    help="VARIANT:DxS: run that kernel twice and stop (for ncu --launch-skip 1)")
    args = ap.parse_args()
    import torch

    import pipeline_core_schedules_attention.call as call

    peers = {}
    if Path(args.anchors).is_file():
        peers = load_anchors(args.anchors).attention_peers()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    if args.one:
        name, cfg = args.one.split(":")
        d, s = (int(x) for x in cfg.split("x"))
        q, k, v = (torch.randn(16384 // s, 2048 // d, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        for _ in each_variant(call, [name]):
            for _ in range(2):
                call.attention(q, k, v, causal=args.causal)
            torch.cuda.synchronize()
        return
    if args.phase == "strides":
        strided(torch, call)
    if args.phase == "strides-time":
        configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
        strided_timing(torch, call, args.rounds, configs, args.causal)
    if args.phase == "small":
        emit(run_case(torch, call, {}, 1, 2, 100, 77, 64, "bf16", args.causal))
    if args.phase in ("all", "correct"):
        names = list(VARIANTS) if args.variants == "all" else [
            n for n in args.variants.split(",") if n]
        if names:
            for name in each_variant(call, names):
                correctness(torch, call, peers, rng, args.causal, args.random_cases, name,
                            VARIANT_DIMS.get(name, (64, 128)))
        else:
            correctness(torch, call, peers, rng, args.causal, args.random_cases)
        bad = [r for r in LINES if r["kind"] == "correct" and not r["ok"]]
        errs = [r["err"] for r in LINES if r["kind"] == "correct"]
        emit({"kind": "correct-summary", "cases": len(errs), "failed": len(bad),
              "max_err": max(errs)})
    if args.phase in ("all", "time"):
        configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
        timing(torch, call, peers, args.rounds, configs, args.causal)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "attention.jsonl", "a") as f:
            for r in LINES:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

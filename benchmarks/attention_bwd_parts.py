"""Where the attention backward's time goes, kernel by kernel: the preprocess (delta, the dQ
accumulator zeroed), the main kernel and the postprocess (dQ cast), against the whole op and a
same-run device-to-device copy of as many bytes as the two small kernels move.

  python3 benchmarks/attention_bwd_parts.py [--rounds N] [--out FILE]
  python3 benchmarks/attention_bwd_parts.py --prebuild-only

16k tokens, hidden 2048 (B = 16384 / S, H = 2048 / D), bf16, D 64 / 128, S 1k / 4k / 16k,
causal or not; each part timed alone by CUDA events in interleaved rounds (bench_timing), the
median of each round's medians.  The small kernels are memory-bound: each line gives the bytes
they move (the preprocess reads O and dO and writes the zeroed fp32 accumulator, delta and the
padded LSE; the postprocess reads the accumulator and writes dQ) and the bandwidth that makes,
beside the copy's.  Nothing here is asserted: it is for the closing note and the guide
(docs/guide/attention.md, "The op's three kernels").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOKENS, HIDDEN = 16384, 2048
CONFIGS = tuple((d, s, c) for d in (64, 128) for s in (1024, 4096, 16384) for c in (False, True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--prebuild-only", action="store_true")
    a = ap.parse_args()
    from pipeline_core_schedules_attention import bwd_call, bwd_prepost
    if a.prebuild_only:
        from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

        bwd_call.prebuild(tuple(v for v in bwd_call.VARIANTS if v[1] == "bf16"
                                and v[3] == "top_left"))
        for d in (64, 128):
            src = bwd_prepost.source(d, "bf16")
            for name in (bwd_prepost.PRE_NAME, bwd_prepost.POST_NAME):
                cubin_path(src, name, BUILD_OPTIONS, ARCH)
        return 0
    import torch  # type: ignore[import-not-found]
    from bench_timing import interleaved

    out = []
    for d, s, causal in CONFIGS:
        b, h = TOKENS // s, HIDDEN // d
        q, k, v, o, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                          for _ in range(5))
        lse = torch.randn(b, h, s, device="cuda").abs() + 5.0
        lse_pad, delta, dq_accum = bwd_prepost.preprocess(o, do, lse)
        moved_pre = 2 * o.numel() * 2 + dq_accum.numel() * 4 + 2 * delta.numel() * 4
        moved_post = dq_accum.numel() * 4 + q.numel() * 2
        src = torch.empty(moved_pre // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)

        def whole() -> None:
            lp, dl, acc = bwd_prepost.preprocess(o, do, lse)
            bwd_call.attention_bwd_main(q, k, v, do, lp, dl, acc, causal=causal,
                                        scale=d ** -0.5)
            bwd_prepost.postprocess(acc, q)

        impls = {
            "pre": lambda: bwd_prepost.preprocess(o, do, lse),
            "main": lambda: bwd_call.attention_bwd_main(q, k, v, do, lse_pad, delta, dq_accum,
                                                        causal=causal, scale=d ** -0.5),
            "post": lambda: bwd_prepost.postprocess(dq_accum, q),
            "whole": whole,
            "copy": lambda: dst.copy_(src),
        }
        per = interleaved(torch, impls, a.rounds)
        ms = {n: statistics.median(v) for n, v in per.items()}
        rec = {"kind": "parts", "D": d, "S": s, "causal": causal, "B": b, "H": h,
               "us": {n: round(1000 * v, 1) for n, v in ms.items()},
               "pre_bytes": moved_pre, "post_bytes": moved_post,
               "pre_tb_per_s": round(moved_pre / ms["pre"] / 1e9, 2),
               "post_tb_per_s": round(moved_post / ms["post"] / 1e9, 2),
               "copy_tb_per_s": round(2 * src.numel() / ms["copy"] / 1e9, 2),
               "small_share_of_whole": round((ms["pre"] + ms["post"]) / ms["whole"], 3)}
        print(json.dumps(rec), flush=True)
        out.append(rec)
    if a.out:
        a.out.write_text("".join(json.dumps(r) + "\n" for r in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

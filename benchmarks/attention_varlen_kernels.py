"""The packed forward's kernel against the fixed-length one on the same buffer (issue 37: the
varlen causal gap; docs/guide/attention.md, "Warp-uniform tile values").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_varlen_kernels.py B S D CAUSAL
  ... attention_varlen_kernels.py prebuild     # no GPU: the cubins into PIPELINE_CORE_CACHE_DIR

One process, bf16, B sequences of S tokens packed, hidden 2048 (H = 2048 / D), fresh inputs:
``attention()`` on the [B, H, S, D] view of the buffer (``fixed``), ``attention_varlen`` as the
call builds it (``varlen``: no LSE stored, ``-p uniform_tiles`` where the call takes it), with
``return_lse`` (``varlen_lse``: the store compiled in) and with ``-p uniform_tiles`` flipped
from the call's choice (``varlen_flipped``).  The varlen output is checked equal to the
fixed-length one first; then CUDA-graph replays timed in interleaved rounds with the order
rotated.  One JSON line: each kernel's median ms and its per-round speed against ``fixed``.
Records: results/attention_varlen_uniform_s16_h200.jsonl (the call's choice),
results/attention_varlen_uniform_all_s16_h200.jsonl (an earlier cut with uniform tiles at
every head dim and causality, where ``varlen_before`` is the kernel without them).
"""
from __future__ import annotations

import json
import statistics
import sys
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import graphed, interleaved, ratios  # noqa: E402  (beside this script)

CASES = ((1, 16384, 128, 1), (1, 16384, 64, 1), (4, 4096, 128, 1), (4, 4096, 64, 1),
         (4, 4096, 128, 0), (4, 4096, 64, 0))


def flipped_params():
    """varlen_call.varlen_params with ``-p uniform_tiles`` the other way."""
    from pipeline_core_schedules_attention import varlen_call

    chosen = varlen_call.varlen_params

    def params(head_dim, causal, align="top_left", short=False, lse=True):
        p = chosen(head_dim, causal, align, short, lse)
        return {**p, "uniform_tiles": "false" if p.get("uniform_tiles") == "true" else "true"}
    return params


def prebuild() -> None:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention import varlen_call
    from pipeline_core_schedules_attention.call import _source, stores_lse
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    built = 0
    for _, _, d, c in CASES:
        causal, plain = bool(c), stores_lse(d, bool(c), False)  # the kernels the calls build
        sources = [_source(d, "bf16", causal, "top_left", lse=plain)[1]]
        for lse in {plain, True}:
            sources.append(varlen_call.varlen_source(d, "bf16", causal, "top_left", False,
                                                     lse)[1])
        chosen, varlen_call.varlen_params = varlen_call.varlen_params, flipped_params()
        try:
            sources.append(varlen_call.varlen_source(d, "bf16", causal, "top_left", False,
                                                     plain)[1])
        finally:
            varlen_call.varlen_params = chosen
        built += sum(cubin_path(s, KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None for s in sources)
    print(json.dumps({"kind": "prebuild", "built": built}))


def main() -> None:
    if sys.argv[1:] == ["prebuild"]:
        prebuild()
        return
    import torch

    from pipeline_core_schedules_attention import attention, attention_varlen, varlen_call

    b, s, d, causal = (int(x) for x in sys.argv[1:5])
    causal = bool(causal)
    h = 2048 // d
    q, k, v = (torch.randn(b * s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cq = torch.tensor([0, *accumulate([s] * b)], dtype=torch.int32, device="cuda")
    views = tuple(x.view(b, s, h, d).transpose(1, 2) for x in (q, k, v))

    def varlen(**kw):
        return attention_varlen(q, k, v, cq, cq, s, s, causal=causal, **kw)

    fns = {"fixed": graphed(torch, lambda: attention(*views, causal=causal)),
           "varlen": graphed(torch, varlen),
           "varlen_lse": graphed(torch, lambda: varlen(return_lse=True))}
    ref = attention(*views, causal=causal).transpose(1, 2).reshape(b * s, h, d).float()
    diff = float((varlen().float() - ref).abs().max())
    kept = [varlen_call.VARLEN.kernels[key] for key in varlen_call.VARLEN.kernels]  # graphs
    varlen_call.varlen_params = flipped_params()
    for cache in (varlen_call.VARLEN.kernels, varlen_call.VARLEN.recipes,
                  varlen_call.VARLEN.args):
        cache.clear()
    fns["varlen_flipped"] = graphed(torch, varlen)
    per = interleaved(torch, fns, 7, 10)
    print(json.dumps({"B": b, "S": s, "D": d, "causal": causal, "max_diff_varlen_vs_fixed": diff,
                      "ms": {n: round(statistics.median(t), 4) for n, t in per.items()},
                      "speed_vs_fixed": {n: statistics.median(ratios(per, n, "fixed"))
                                         for n in per if n != "fixed"},
                      "per_round": {n: [round(x, 4) for x in t] for n, t in per.items()},
                      "kept": len(kept)}), flush=True)


if __name__ == "__main__":
    main()

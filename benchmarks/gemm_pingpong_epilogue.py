"""The call's ping-pong pick against its cooperative one under fused epilogues (bias + gelu,
bias + relu), bf16, one process: ``Tuning.pingpong`` on and off (docs/guide/matmul.md,
"Ping-pong").

  python3 benchmarks/gemm_pingpong_epilogue.py

Why: the 128x192 ping-pong kernel with bias and gelu spills 68 bytes (the only epilogue that
does), and its consumers' epilogues overlap the other's mainloop, which a heavier epilogue
should pay for more.  Each shape checks both picks against an fp32 reference (NaN-poisoned
output), then times the four calls in interleaved rounds (5, CUDA-event medians), the per-round
ratio ping-pong over cooperative.  Session 25's run: results/gemm_pingpong_epilogue_s25_h200.jsonl.
"""
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from gemm_build import under_tuning  # noqa: E402  (beside this script)

SHAPES = ((8192, 8192, 8192), (8192, 14336, 4096))


def main() -> None:
    import attrs
    import torch
    import torch.nn.functional as F
    from pipeline_core_nvidia_h100 import matmul, matmul_call as mm

    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(n, k, device="cuda").bfloat16().T
        bias = torch.randn(n, device="cuda").bfloat16()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls = {}
        for act in ("gelu", "relu"):
            for pp in (True, False):
                impls[f"{act}-{'pp' if pp else 'coop'}"] = under_tuning(
                    attrs.evolve(mm.TUNING, pingpong=pp),
                    lambda act=act: matmul(a, b, bias=bias, activation=act, out=out))
        ref = F.gelu(a.float() @ b.float() + bias.float(), approximate="tanh")
        errs = {}
        for name in ("gelu-pp", "gelu-coop"):
            out.fill_(float("nan"))
            impls[name]()
            torch.cuda.synchronize()
            errs[name] = ((out.float() - ref).norm() / ref.norm()).item()
        del ref
        per = interleaved(torch, impls, 5)
        print(json.dumps({"shape": [m, n, k], "err": errs,
                          **{x: round(2.0 * m * n * k / statistics.median(per[x]) / 1e9, 1)
                             for x in impls},
                          "gelu pp/coop": statistics.median(ratios(per, "gelu-pp", "gelu-coop")),
                          "relu pp/coop": statistics.median(ratios(per, "relu-pp", "relu-coop"))}),
              flush=True)


if __name__ == "__main__":
    main()

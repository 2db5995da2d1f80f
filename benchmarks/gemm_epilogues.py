"""The GEMM's fused epilogues on the GPU (bias, relu, gelu, silu): the activations' accuracy
element by element, then the call, the ping-pong and cooperative kernels forced, against
cuBLASLt's fused epilogue and torch's unfused addmm + activation, one process.

  python3 benchmarks/gemm_epilogues.py --prebuild-only   # here, no GPU: the cubins
  python3 benchmarks/gemm_epilogues.py [--rounds 5] [--old] [--out F.jsonl]

Why: session 26 wrote the epilogue's gelu as x sigmoid(2 z) with one exp and a fast divide, in
place of 0.5 x (1 + tanhf(z)) (``gemm_call_h100.cuh``, ``ActGelu``): the tanhf form spilled 68
bytes in the 128x192 ping-pong kernel with a bias and doubled the epilogue's code; silu's IEEE
divide (a called slow path) likewise took the fast one.  ``--old``
builds the kernels with the tanhf form again (the header's text patched in this process, kernels
cached apart by their source), so two processes compare the forms through the same peers;
``--late-bias`` likewise builds every TMA-store epilogue with its bias read per sub-tile
(``WsGeometry.bias_early`` off).

1. **accuracy**: gelu(x) and silu(x) for x on a grid over [-12, 12] (a GEMM of K 16 whose
   product is x, bias 0, bf16 out, NaN-poisoned) against fp64's, each element within one bf16
   ulp of the rounded reference plus 1e-6, the negative tail included (where 1 + tanh cancels).
2. **correct**: each shape's call (its own pick and the cooperative one) against an fp32
   reference, NaN-poisoned output, relative Frobenius error under :data:`TOL`.
3. **time**: per shape and epilogue (bias + gelu, + silu, + relu, bias alone, none), interleaved
   rounds, CUDA-event medians, per-round ratios: ours (the call's pick), the 128x192 ping-pong
   and the 128x256 cooperative kernels forced (:data:`FORCED`), cuBLASLt's fused epilogue
   (``torch._addmm_activation``, ``torch.addmm``; SiLU, which it lacks: its bias epilogue, then
   ``F.silu``), and for gelu torch's unfused ``F.gelu(torch.addmm(...))``.  Why the forced pair: a ping-pong consumer's epilogue runs under
   the other's mainloop, and the wave model that picks the tile prices no epilogue.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]

from bench_checks import emit, timing_args  # noqa: E402  (beside this script)
from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from gemm_build import kernel_key, prebuild  # noqa: E402  (beside this script)

SHAPES = ((8192, 8192, 8192), (8192, 14336, 4096), (4096, 4096, 4096), (4096, 8192, 2048),
          (4000, 4000, 4000), (16384, 1024, 4096), (3000, 14336, 4096), (2000, 5000, 3000),
          (8192, 4096, 14336), (4096, 4096, 1024), (2048, 8192, 1024))
#: the epilogues timed: (name, bias, activation)
EPILOGUES = (("gelu", True, "gelu"), ("silu", True, "silu"), ("relu", True, "relu"),
             ("bias", True, None), ("none", False, None))
#: the kernels forced beside the call's pick: (name, bm, bn, ping-pong)
FORCED = (("pp", 128, 192, True), ("coop", 128, 256, False))
TOL = 4e-3
#: the header's gelu before session 26 (``--old``)
OLD_GELU = ("return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * "
            "x)));")


def use_old_gelu() -> None:
    """Patch the pasted header's ActGelu back to the tanhf form (the emitter reads it by name)."""
    from pipeline_core_nvidia_h100 import emit_wgmma

    plain = emit_wgmma.gemm_call_header_source
    new = "return __fdividef(x, 1.f + __expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));"

    def old() -> str:
        text = plain()
        if new not in text:
            raise RuntimeError("--old: the header's gelu is not the one this script patches")
        return text.replace(new, OLD_GELU)
    emit_wgmma.gemm_call_header_source = old


def forced(bm: int, bn: int, pingpong: bool):
    from pipeline_core_nvidia_h100.autotune import Candidate

    return Candidate(bm=bm, bn=bn, stages=4, consumers=2, pingpong=pingpong)


def descriptions() -> list[tuple]:
    """What the timed calls launch, from tensor descriptions (gemm_build.kernel_key, and the
    forced kernels as matmul_call.plan_infos plans them)."""
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo

    keys = []
    for m, n, k in ((256, 64, 16), *SHAPES):
        a = TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16", ptr=0)
        b = TensorInfo(shape=(k, n), strides=(1, k), dtype="bf16", ptr=0)
        bias = TensorInfo(shape=(n,), strides=(1,), dtype="bf16", ptr=0)
        out = TensorInfo(shape=(m, n), strides=(n, 1), dtype="bf16", ptr=0)
        for _, has_bias, act in EPILOGUES:
            b_ = bias if has_bias else None
            keys.append(kernel_key(a, b, bias=b_, activation=act, out=out))
            for _, bm, bn, pp in FORCED:
                c = forced(bm, bn, pp)
                keys.append((mm.plan_infos(a, b, b_, act, None, out, 132, mm.TUNING, c).variant, c))
    return keys


def accuracy(torch, act: str) -> bool:
    """``act`` (gelu, silu) over a grid of x, each element against fp64's within a bf16 ulp
    (the module)."""
    import torch.nn.functional as F

    from pipeline_core_nvidia_h100 import matmul

    x = torch.linspace(-12, 12, 256 * 64, dtype=torch.float64, device="cuda").reshape(256, 64)
    x = x.to(torch.bfloat16)  # the product is exact: x times 1, K 16 of zeros besides
    a = torch.zeros(256, 16, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(16, 64, device="cuda", dtype=torch.bfloat16)
    out = torch.full((256, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    worst, bad = 0.0, 0
    for col in range(64):  # column col of the product: a[:, 0] = x[:, col], b[0, col] = 1
        a[:, 0] = x[:, col]
        b.zero_()
        b[0, col] = 1
        out.fill_(float("nan"))
        res = matmul(a, b, bias=torch.zeros(64, device="cuda", dtype=torch.bfloat16),
                     activation=act, out=out)
        xs = x[:, col].double()
        ref = F.gelu(xs, approximate="tanh") if act == "gelu" else F.silu(xs)
        ulp = ref.to(torch.bfloat16).double().abs().clamp_min(1e-30)
        ulp = 2.0 ** (torch.floor(torch.log2(ulp)) - 7)
        err = (res[:, col].double() - ref).abs()
        worst = max(worst, (err / (ulp + 1e-6)).nan_to_num(float("inf")).max().item())
        bad += int((~(err <= ulp + 1e-6)).sum().item())  # a NaN is beyond too
    emit({"kind": "accuracy", "activation": act, "elements": 256 * 64, "beyond_one_ulp": bad,
          "worst_in_ulps": round(worst, 3)})
    return bad == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", action="store_true", help="the tanhf gelu (before session 26)")
    ap.add_argument("--late-bias", action="store_true",
                    help="the bias read per sub-tile everywhere (WsGeometry.bias_early off)")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="here, no GPU: the timed kernels' cubins into PIPELINE_CORE_CACHE_DIR")
    args = timing_args(ap)
    if args.old:
        use_old_gelu()
    if args.late_bias:  # no consumer's registers hold the early read
        from pipeline_core_nvidia_h100 import warpspecialized
        warpspecialized.BIAS_EARLY_SLACK = 1 << 20
    if args.prebuild_only:
        prebuild(None, descriptions(), emit)
        return
    import torch
    import torch.nn.functional as F

    from pipeline_core_nvidia_h100 import matmul, matmul_call as mm

    torch.manual_seed(26)
    emit({"kind": "form", "gelu": "tanhf (old)" if args.old else "x sigmoid(2z)"})
    prebuild(torch, descriptions(), emit)
    ok = all([accuracy(torch, act) for act in ("gelu", "silu")])
    dev, stream = torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream
    sms = mm.sm_count(dev)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(n, k, device="cuda").bfloat16().T
        bias = torch.randn(n, device="cuda").bfloat16()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for epi, has_bias, act in EPILOGUES:
            bb = bias if has_bias else None
            impls = {"ours": lambda bb=bb, act=act: matmul(a, b, bias=bb, activation=act,
                                                           out=out)}
            for name, bm, bn, pp in FORCED:
                c = forced(bm, bn, pp)
                r = mm._recipe(mm._plan(a, b, bb, act, None, out, sms, mm.TUNING, c), dev,
                               stream, c)
                impls[name] = lambda r=r, bb=bb: mm.launch_recipe(r, a, b, bb, out)
            if act == "silu":  # cuBLASLt has no SiLU epilogue: its bias one, then torch's
                impls["cublaslt"] = lambda: F.silu(torch.addmm(bias, a, b))
            elif act is not None:
                impls["cublaslt"] = (lambda act=act: torch._addmm_activation(
                    bias, a, b, use_gelu=act == "gelu"))
            else:
                impls["cublaslt"] = ((lambda: torch.addmm(bias, a, b)) if has_bias
                                     else (lambda: torch.matmul(a, b)))
            if act == "gelu":
                impls["torch"] = lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh")
            ref = a.float() @ b.float() + (bias.float() if has_bias else 0)
            ref = (F.gelu(ref, approximate="tanh") if act == "gelu" else F.relu(ref)
                   if act == "relu" else F.silu(ref) if act == "silu" else ref)
            errs = {}
            for name, fn in impls.items():
                out.fill_(float("nan"))
                res = fn()
                res = out if res is None else res
                torch.cuda.synchronize()
                errs[name] = round(((res.float() - ref).norm() / ref.norm()).item(), 6)
            good = all(e < TOL for e in errs.values())
            emit({"kind": "check", "shape": [m, n, k], "epilogue": epi, "errors": errs,
                  "ok": good})
            ok = ok and good
            per = interleaved(torch, impls, args.rounds)
            emit({"kind": "time", "shape": [m, n, k], "epilogue": epi,
                  "tflops": {x: round(2.0 * m * n * k / statistics.median(v) / 1e9, 1)
                             for x, v in per.items()},
                  **{f"ours/{x}": ratios(per, "ours", x) for x in impls if x != "ours"},
                  "pp/coop": ratios(per, "pp", "coop")})
    emit({"kind": "summary", "ok": ok})


if __name__ == "__main__":
    main()

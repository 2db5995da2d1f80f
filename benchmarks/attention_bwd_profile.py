"""One backward main kernel and one cuDNN backward at a configuration, for a profiler
(Nsight Compute) to read: nothing timed here.

  ncu --clock-control none -k regex:pc_flash_attention_bwd -c 1 ... \\
      python3 benchmarks/attention_bwd_profile.py [--d 128] [--s 4096] [--causal]

16k tokens, hidden 2048 (H = 2048 / D), bf16, as ``attention_bwd_main_check.py --time``: the
call's main kernel (``bwd_call.attention_bwd_main``) on random inputs, then sdpa-cudnn's forward
and backward (its kernels named ``cudnn`` / ``flash_bprop``), each run twice (the first
launch builds and loads).  ``--prebuild-only``: the call's cubins built, no GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--prebuild-only", action="store_true")
    a = ap.parse_args()
    from pipeline_core_schedules_attention import bwd_call as bwd
    if a.prebuild_only:
        bwd.prebuild(tuple(v for v in bwd.VARIANTS if v[0] == a.d and v[1] == "bf16"))
        return 0
    import torch  # type: ignore[import-not-found]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d = 16384 // a.s, 2048 // a.d, a.s, a.d
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lse = torch.randn(b, h, s, device="cuda").abs() + 5.0
    delta = torch.randn(b, h, s, device="cuda")
    dq_accum = torch.zeros(b, h, -(-s // bwd.DQ_ROWS) * bwd.DQ_ROWS, d, device="cuda")
    for _ in range(2):
        bwd.attention_bwd_main(q, k, v, do, lse, delta, dq_accum, causal=a.causal,
                               scale=d ** -0.5)
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=a.causal)
    for _ in range(2):
        torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

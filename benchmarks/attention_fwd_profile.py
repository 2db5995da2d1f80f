"""The call's forward and sdpa-cudnn's at one configuration, for a profiler (Nsight Compute) to
read: nothing timed here (attention_bwd_profile.py is the backward's).

  ncu --clock-control none -k regex:"pc_flash_attention_fwd|cudnn|fprop" -c 4 ... \\
      python3 benchmarks/attention_fwd_profile.py [--d 128] [--s 1024] [--causal]

16k tokens, hidden 2048 (H = 2048 / D), bf16, as ``attention_tiles.py`` times them: the call
(``attention()``, no gradient: the kernel without the LSE store where the call takes it) on
[B, H, S, D] views of [B, S, H, D] buffers, with ``--varlen`` the packed call on the same
buffers, and sdpa-cudnn's forward, each run twice (the first launch builds and loads).  ``--prebuild-only``:
the call's cubins built, no GPU.
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
    ap.add_argument("--s", type=int, default=1024)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--order", default="", help="hg,snake: a causal tile order in place of the "
                                                "call's choice (call.ORDER)")
    ap.add_argument("--varlen", action="store_true",
                    help="the packed varlen call on the same buffer (B sequences of S) too, as "
                         "attention_varlen.py's equal-length case compares it with the call")
    ap.add_argument("--prebuild-only", action="store_true")
    a = ap.parse_args()
    b, h, s, d = 16384 // a.s, 2048 // a.d, a.s, a.d
    if a.prebuild_only:  # the kernel the call builds for these shapes, built on the host
        import attention_tiles  # beside this script: its prebuild is the call's own
        from pipeline_core_schedules_attention import call
        attention_tiles.prebuild(call, [f"{d}x{s}{'c' if a.causal else ''}"], ["call"])
        return 0
    import torch  # type: ignore[import-not-found]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pipeline_core_schedules_attention import attention, call
    from pipeline_core_schedules_attention.tile_order import TileOrder

    if a.order:
        hg, snake = (int(x) for x in a.order.split(","))
        call.ORDER = TileOrder(hg=hg, snake=bool(snake))
    # one [B, S, H, D] buffer each, the call reading its [B, H, S, D] view (no copy)
    packed = [torch.randn(b * s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    q, k, v = (t.view(b, s, h, d).transpose(1, 2) for t in packed)
    with torch.no_grad():
        for _ in range(2):
            attention(q, k, v, causal=a.causal)
        if a.varlen:
            from pipeline_core_schedules_attention import attention_varlen
            cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device="cuda")
            for _ in range(2):
                attention_varlen(*packed, cu, cu, s, s, causal=a.causal)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(2):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One decode step of each asked configuration inside a CUDA profiler range, for Nsight
Compute (``--profile-from-start off``): what a contiguous, a paged and a split step spend.

  ncu --profile-from-start off --set full -o OUT python3 benchmarks/attention_decode_profile.py \
      64x8192x0 64x8192x16 1x8192x0

Each argument is BATCHxKEYSxPAGE (PAGE 0: the contiguous cache), Hq/Hkv 32/8, D 128, bf16,
Sq 1; the pages in a random order (attention_decode.py's cache).  Each step is run twice
before its range (the kernel built and loaded, the split workspace made).
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention",
              ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def main() -> None:
    import torch

    from attention_decode import cache
    from pipeline_core_schedules_attention.decode_call import attention_decode

    rng = random.Random(0)
    for spec in sys.argv[1:]:
        b, n, page = (int(x) for x in spec.split("x"))
        kc, vc, table, lens, _ = cache(torch, page, [n] * b, 8, 128, "bf16", rng)
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            for _ in range(2):
                attention_decode(q, kc, vc, cache_seqlens=lens, block_table=table)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            attention_decode(q, kc, vc, cache_seqlens=lens, block_table=table)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
        del kc, vc, table
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

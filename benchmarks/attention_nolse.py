"""The forward with its LSE store compiled out (``-p lse=false``: a call that needs no LSE) against
the kernel that keeps the store and takes a null LSE (what every no-gradient call ran before);
docs/guide/attention.md, "The LSE only when asked".

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_nolse.py
  ... attention_nolse.py prebuild      # no GPU: both kernels of every case into the disk cache

One process, bf16, 16k tokens, hidden 2048 (H = 2048 / D), fresh inputs, no gradient: per case
the two outputs are compared bit for bit first (only the LSE's store differs), then CUDA-graph
replays timed in interleaved rounds with the order rotated.  One JSON line per case: each
kernel's median ms and the per-round speed of the new kernel against the old.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import graphed, interleaved, ratios  # noqa: E402  (beside this script)

#: (batch, sequence, head dim, causal)
CASES = ((4, 4096, 64, False), (1, 16384, 64, False), (4, 4096, 128, False),
         (1, 16384, 128, False), (4, 4096, 64, True), (4, 4096, 128, True),
         (1, 16384, 128, True))


def prebuild() -> None:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.call import _source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    built = sum(cubin_path(_source(d, "bf16", c, "top_left", lse=lse)[1], KERNEL_NAME,
                           BUILD_OPTIONS, ARCH) is not None
                for _, _, d, c in CASES for lse in (True, False))
    print(json.dumps({"kind": "prebuild", "built": built, "of": 2 * len(CASES)}))


def main() -> None:
    if sys.argv[1:] == ["prebuild"]:
        prebuild()
        return
    import torch

    from pipeline_core_schedules_attention import attention, call

    chosen = call._kernel_key
    for b, s, d, causal in CASES:
        h = 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        fns, outs = {}, {}
        # each kernel forced, whatever call.LSE_KEPT picks for the case (its choice is made
        # from these figures)
        for name, key in (("nolse", lambda c, dev, lse=True: chosen(c, dev, False)),
                          ("old", lambda c, dev, lse=True: chosen(c, dev, True))):
            call._kernel_key = key
            for cache in (call.CALL.recipes, call.CALL.args):
                cache.clear()
            outs[name] = attention(q, k, v, causal=causal)
            fns[name] = graphed(torch, lambda: attention(q, k, v, causal=causal))
        call._kernel_key = chosen
        same = bool(torch.equal(outs["nolse"], outs["old"]))
        per = interleaved(torch, fns, 7, 10)
        print(json.dumps({"B": b, "S": s, "D": d, "causal": causal, "bitwise_equal": same,
                          "ms": {n: round(statistics.median(t), 4) for n, t in per.items()},
                          "speed_nolse_over_old": statistics.median(ratios(per, "nolse", "old")),
                          "per_round": ratios(per, "nolse", "old")}), flush=True)


if __name__ == "__main__":
    main()

"""The calls that keep per-stream memory, captured the usual way: ``torch.cuda.graph(g)`` on
torch's own capture stream (which no eager call runs on), after warm-up on a side stream, as
torch's CUDA-graph guide does.  Each replay (output NaN-poisoned first) must equal the eager
call bit for bit: the split-K GEMM (small M x N, long K), grouped_mm 2-D x 2-D (groups along K:
its pre-pass's tensor maps), split-KV decoding at batch 1 over 128k keys (and pages of 64).
Until session 21 the first and last ran unsplit there and the second was refused.

  python3 benchmarks/capture_check.py        # on the GPU; one JSON line a case
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def captured(torch, fn):
    """``fn``'s output eager, and the output of its graph's replay (the graph captured on
    torch's own capture stream after a warm-up on a side stream; the output NaN-poisoned
    before the replay)."""
    want = fn().clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = fn()
    got.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return want, got


def main() -> int:
    import torch

    from pipeline_core_nvidia_h100.matmul_call import grouped_mm, matmul
    from pipeline_core_schedules_attention.decode_call import attention_decode

    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    a, b = torch.randn(64, 16384, device=dev, dtype=bf), torch.randn(16384, 256, device=dev,
                                                                     dtype=bf)
    ga, gb = torch.randn(256, 4096, device=dev, dtype=bf), torch.randn(4096, 512, device=dev,
                                                                       dtype=bf)
    offs = torch.tensor([1024, 1024, 3000, 4096], device=dev, dtype=torch.int32)
    q = torch.randn(1, 1, 32, 128, device=dev, dtype=bf)
    k, v = (torch.randn(1, 131072, 8, 128, device=dev, dtype=bf) for _ in range(2))
    lens = torch.tensor([131000], device=dev, dtype=torch.int32)
    table = torch.randperm(2048, device=dev, dtype=torch.int32).view(1, 2048)
    kp, vp = (torch.empty(2048, 64, 8, 128, device=dev, dtype=bf) for _ in range(2))
    kp[table.long().flatten()] = k.view(2048, 64, 8, 128)
    vp[table.long().flatten()] = v.view(2048, 64, 8, 128)
    cases = {
        "matmul split-K 64x256x16384": (lambda: matmul(a, b), lambda: a.float() @ b.float()),
        "grouped_mm 2-D x 2-D (groups along K)": (
            lambda: grouped_mm(ga, gb, offs=offs),
            lambda: torch.stack([ga[:, s:e].float() @ gb[s:e].float() for s, e in
                                 zip([0, *offs.tolist()[:-1]], offs.tolist())])),
        "attention_decode 1 x 131000 keys": (
            lambda: attention_decode(q, k, v, cache_seqlens=lens), None),
        "attention_decode 1 x 131000 keys, pages of 64": (
            lambda: attention_decode(q, kp, vp, cache_seqlens=lens, block_table=table), None),
    }
    ok = True
    for name, (fn, ref) in cases.items():
        try:
            with torch.inference_mode():
                want, got = captured(torch, fn)
            rec = {"case": name, "bitwise_equal": bool(torch.equal(want, got))}
            if ref is not None:
                r = ref()
                rec["rel_err"] = float((got.float() - r).norm() / r.norm())
                rec["bitwise_equal"] &= rec["rel_err"] < 2e-2
        except Exception as exc:  # noqa: BLE001 - one line a case
            rec = {"case": name, "bitwise_equal": False,
                   "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        ok &= rec["bitwise_equal"]
        print(json.dumps(rec), flush=True)
    print(json.dumps({"kind": "summary", "result": "PASS" if ok else "FAIL"}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""A/B of the tensor maps' L2 promotion (tma.L2_PROMOTION) on a shape whose rows lie off the
128-byte line: ``matmul`` in place and on the same values in padded rows, against cuBLAS, in
one process (5 interleaved rounds of 30 CUDA-event timings each; per-round ratios vs cuBLAS).

  python3 benchmarks/gemm_l2_promotion.py PROMO CLUSTER [MxNxK] [--prebuild-only]

PROMO: ``rule`` (what the call does: tma.L2_PROMOTION, 128 bytes) or a
CU_TENSOR_MAP_L2_PROMOTION value forced on every map (0 none, 1 64B, 2 128B, 3 256B);
CLUSTER: ``Tuning.cluster`` (1 or 2).  Default shape 2000x5000x3000 (6000- and 10000-byte
rows).  Measured on an H200 (session 17): 2000x5000x3000 144 us at 3 against 126-127 at 0, 1, 2
and the rule of then (128 off the line, 256 on it); padded rows 92.5-93.9 whatever the promotion; 4000^3 (8000-byte rows) 0.999 of
cuBLAS by the rule, 0.975 at 3.
"""
import sys, json, statistics, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import attrs
from gemm_build import kernel_key, prebuild
from pipeline_core_nvidia_h100.gemm_call import TensorInfo
from pipeline_core_nvidia_h100 import tma, matmul_call as mm
promo, cluster = sys.argv[1], int(sys.argv[2])
if promo != 'rule':
    tma.L2_PROMOTION = int(promo)
mm.TUNING = attrs.evolve(mm.TUNING, cluster=cluster)
M, N, K = (int(x) for x in sys.argv[3].split("x")) if len(sys.argv) > 3 and "x" in sys.argv[3] else (2000, 5000, 3000)
KP, NP = -(-K // 64) * 64, -(-N // 64) * 64
i = lambda s, st: TensorInfo(shape=s, strides=st, dtype="bf16", ptr=0)
keys = [kernel_key(i((M, K), (K, 1)), i((K, N), (N, 1))), kernel_key(i((M, K), (KP, 1)), i((K, N), (NP, 1)))]
if "--prebuild-only" in sys.argv:
    prebuild(None, keys, print); sys.exit()
import torch
prebuild(torch, keys, lambda *a: None)
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
ap = torch.empty(M, KP, device="cuda", dtype=torch.bfloat16)[:, :K]; ap.copy_(a)
bp = torch.empty(K, NP, device="cuda", dtype=torch.bfloat16)[:, :N]; bp.copy_(b)
ref = a.float() @ b.float()
o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
impls = {"ours": lambda: mm.matmul(a, b, out=o), "ours-padded": lambda: mm.matmul(ap, bp, out=o), "cublas": lambda: torch.matmul(a, b, out=o)}
for n, f in impls.items():
    o.fill_(float("nan")); f(); torch.cuda.synchronize()
    assert float((o.float() - ref).norm() / ref.norm()) < 1e-2, n
def ev(f, reps=30):
    for _ in range(3): f()
    es = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in es: s.record(); f(); e.record()
    torch.cuda.synchronize(); return statistics.median(s.elapsed_time(e) for s, e in es)
per = {n: [] for n in impls}
for r in range(5):
    for n in list(impls)[r % 3:] + list(impls)[:r % 3]: per[n].append(ev(impls[n]))
print(json.dumps({"shape": f"{M}x{N}x{K}", "promo": promo, "cluster": cluster, **{n: round(statistics.median(v) * 1000, 1) for n, v in per.items()},
                  "ratio_vs_cublas": [round(c / x, 3) for x, c in zip(per["ours"], per["cublas"])]}), flush=True)

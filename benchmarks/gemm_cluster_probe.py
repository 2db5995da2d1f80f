"""Where a 2-CTA cluster's time goes (docs/guide/matmul.md, "Clusters"): the call's cluster
kernel against its ``cluster=1`` kernel and cuBLAS, in one process, with the cluster kernel's
source rewritten one way per process (a probe of costs, not a kernel the call builds).

  python3 benchmarks/gemm_cluster_probe.py REWRITE [MxNxK ...] [--prebuild-only]

REWRITE, each a probe's edit of the emitted cluster kernel:

* ``none``: the proven kernel.
* ``relay2`` / ``relay3``: the relay on 2 or 3 warps, each forwarding its own K tiles, each
  keeping its cluster-scope release.
* ``cta``: the relay's peer arrival at CTA scope and the producer's wait acquiring at CTA
  scope. No MEMBAR.ALL.GPU on the relay, no CCTL.IVALL on the producer. This is what
  CUTLASS's Hopper pipelines emit, and what the proof refuses.
* ``cta_wait``: the wait alone at CTA scope.

Also prints the driver's cuOccupancyMaxActiveClusters for the cluster kernel (a persistent
grid of more clusters than fit runs its last ones late).
Operands row-major ([M, K] and [K, N]) as a model holds them; 5 interleaved rounds of 30
CUDA-event timings; per-round ratios.
"""
import ctypes, json, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import attrs
from bench_timing import interleaved, ratios
from gemm_build import kernel_key, prebuild
from pipeline_core_nvidia_h100.gemm_call import TensorInfo
from pipeline_core_nvidia_h100 import matmul_call as mm

REWRITES = {"none": (), "cta": (("mbar_arrive_peer(empty_bar", "mbar_arrive_peer_cta(empty_bar"),
                                 ("mbar_wait_cluster(empty_bar", "mbar_wait(empty_bar")),
            "cta_wait": (("mbar_wait_cluster(empty_bar", "mbar_wait(empty_bar"),),
            # the proven kernel's relay spread over 2 or 3 threads of different warps (warps 1
            # to 3 of the producer warp group), K tile t's forwarded by relay t % n: each
            # keeps its cluster-scope release, and their fences overlap
            "relay2": (("if (wtid == 32) {", "if (wtid == 32 || wtid == 64) {"),
                       ("mbar_wait(relay_bar(", "if ((rb + t) % 2 == wtid / 32 - 1) { mbar_wait(relay_bar("),
                       ("% STAGES)), (crank + 1) % CLUSTER);", "% STAGES)), (crank + 1) % CLUSTER); }")),
            "relay3": (("if (wtid == 32) {", "if (wtid == 32 || wtid == 64 || wtid == 96) {"),
                       ("mbar_wait(relay_bar(", "if ((rb + t) % 3 == wtid / 32 - 1) { mbar_wait(relay_bar("),
                       ("% STAGES)), (crank + 1) % CLUSTER);", "% STAGES)), (crank + 1) % CLUSTER); }"))}
rewrite = REWRITES[sys.argv[1]]
_source = mm.kernel_source


def rewritten(v, c):
    compiled, src = _source(v, c)
    if v.cluster > 1:
        for old, new in rewrite:
            assert old in src, old
            src = src.replace(old, new)
    return compiled, src


mm.kernel_source = rewritten
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2:] if "x" in s] or [
    (2000, 5000, 3000), (8192, 8192, 8192), (4096, 4096, 4096)]
CL2, CL1 = attrs.evolve(mm.TUNING, cluster=2, split_k=False), mm.TUNING
i = lambda s, st: TensorInfo(shape=s, strides=st, dtype="bf16", ptr=0)
keys = []
for M, N, K in shapes:
    for t in (CL1, CL2):
        mm.TUNING = t
        keys.append(kernel_key(i((M, K), (K, 1)), i((K, N), (N, 1))))
if "--prebuild-only" in sys.argv:
    prebuild(None, keys, print)
    sys.exit()
import torch
prebuild(torch, keys, lambda *a: None)


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint),
                ("bx", ctypes.c_uint), ("by", ctypes.c_uint), ("bz", ctypes.c_uint),
                ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


def max_clusters(v, c):
    from pipeline_core_nvidia_h100.launch_cache import function_handle
    k = mm.CALL.kernels.kernel((v, c, torch.cuda.current_device()))
    cu = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(-1)
    cfg = LaunchConfig(132, 1, 1, k.threads, 1, 1, k.smem, None, None, 0)
    rc = cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(function_handle(k.kernel)),
                                         ctypes.byref(cfg))
    return rc, n.value


for (M, N, K), idx in zip(shapes, range(0, 2 * len(shapes), 2)):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

    def ours(t):
        def run():
            mm.TUNING = t
            mm.matmul(a, b, out=o)
        return run
    impls = {"cluster1": ours(CL1), "cluster2": ours(CL2), "cublas": lambda: torch.matmul(a, b, out=o)}
    errs = {}
    for n, f in impls.items():
        o.fill_(float("nan")); f(); torch.cuda.synchronize()
        errs[n] = round(float((o.float() - ref).norm() / ref.norm()), 5)
    del ref
    per = interleaved(torch, impls, 5, reps=30)
    v2, c2 = keys[idx + 1]
    print(json.dumps({"shape": f"{M}x{N}x{K}", "rewrite": sys.argv[1], "errors": errs,
                      "max_active_clusters": max_clusters(v2, c2),
                      **{n: round(statistics.median(x) * 1000, 1) for n, x in per.items()},
                      **{f"{x}/{y}": ratios(per, x, y) for x, y in (("cluster2", "cluster1"),
                                                                     ("cluster2", "cublas"),
                                                                     ("cluster1", "cublas"))}}),
          flush=True)

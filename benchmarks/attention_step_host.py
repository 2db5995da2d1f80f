"""The host's time to enqueue one training step through ``attention()`` (its forward, then
``torch.autograd.grad`` of it), against the GPU's time for the same step, and where the host's
time goes (cProfile).

  python3 benchmarks/attention_step_host.py [--d 128] [--s 1024] [--causal] [--steps N]
                                            [--out FILE]

At short sequences the step's kernels are short enough that the host, not the GPU, sets the
pace: the forward's kernel ends before the host has enqueued the backward's three, and the GPU
waits (docs/guide/attention.md, "A training step's host time").  Printed, for ours (the eager
path: the forward op's autograd twin, kit.call.autograd_function), ``ours-op`` (the same step
through the custom ops, as torch.compile's trace calls them: the twin taken away) and
SDPA-cuDNN, steps interleaved with the order rotated, the GPU idle at each step's start:
``enqueue_us`` (the median wall time the host takes to enqueue a step, nothing synchronized
inside it), ``cpu_us`` (the median CPU time of the calling thread over it: the backward runs
on autograd's own thread, so this is the forward's and the engine's share), ``gpu_us`` (CUDA
events around the step, synchronized after each); and the profile's top entries by own time.
16k tokens, hidden 2048, bf16 (B = 16384 / S, H = 2048 / D).  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
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
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import torch  # type: ignore[import-not-found]
    import torch.nn.functional as F  # type: ignore[import-not-found]
    from torch.nn.attention import SDPBackend, sdpa_kernel  # type: ignore[import-not-found]

    from pipeline_core_schedules_attention import attention, call

    b, h = 16384 // a.s, 2048 // a.d
    q, k, v = (torch.randn(b, h, a.s, a.d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, a.s, a.d, device="cuda", dtype=torch.bfloat16)

    def ours():
        return torch.autograd.grad(attention(q, k, v, causal=a.causal), (q, k, v), do)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        return torch.autograd.grad(o, (q, k, v), do)

    def ours_op():  # the twin taken away for this step: the custom ops' path
        twins, call.CALL._functions = call.CALL._functions, {}
        try:
            return ours()
        finally:
            call.CALL._functions = twins

    steps = {"ours": ours, "ours-op": ours_op, "sdpa-cudnn": cudnn}
    enqueue: dict[str, list[float]] = {n: [] for n in steps}
    cpu: dict[str, list[float]] = {n: [] for n in steps}
    gpu: dict[str, list[float]] = {n: [] for n in steps}
    for step in steps.values():
        for _ in range(5):
            step()
    torch.cuda.synchronize()
    names = list(steps)
    for r in range(a.steps):  # interleaved, the order rotated
        for name in names[r % len(names):] + names[:r % len(names)]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0, c0 = time.perf_counter(), time.thread_time()
            start.record()
            steps[name]()
            end.record()
            enqueue[name].append(time.perf_counter() - t0)
            cpu[name].append(time.thread_time() - c0)
            torch.cuda.synchronize()
            gpu[name].append(start.elapsed_time(end) / 1000)
    out = []
    for name, step in steps.items():
        rec = {"kind": "step", "name": name, "D": a.d, "S": a.s, "causal": a.causal,
               "enqueue_us": round(1e6 * statistics.median(enqueue[name]), 1),
               "cpu_us": round(1e6 * statistics.median(cpu[name]), 1),
               "gpu_us": round(1e6 * statistics.median(gpu[name]), 1)}
        if name == "ours":
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(a.steps):
                step()
            prof.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
            rec["profile_tottime"] = text.getvalue().splitlines()[-32:]
        print(json.dumps(rec), flush=True)
        out.append(rec)
    if a.out:
        a.out.write_text("".join(json.dumps(r) + "\n" for r in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

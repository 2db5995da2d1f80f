"""The GEMM benchmarks' one prebuild: which kernel a call launches, and building them in parallel.

A call launches its variant with the shape's decomposition (decompose.py), or a tuned candidate;
a benchmark that builds its kernels before timing or checking must build those, not the default
tile, or each missing one is built serially the first time a case meets it (tens of seconds of
device time each).  :func:`kernel_key` plans from tensor descriptions (no torch: it runs here,
before a device run, as well as there) and :func:`prebuild` builds every key's cubin into the
disk cache (``PIPELINE_CORE_CACHE_DIR``) with nvcc in parallel, then loads them when torch is
given.  Scripts beside this one import it (a script run as ``python3 benchmarks/X.py`` finds it).
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def under_tuning(tuning: Any, fn: Any) -> Any:
    """``fn`` run with the call's ``matmul_call.TUNING`` set to ``tuning`` (the launch cache is
    keyed by it, so each tuning keeps its own recipe): the GEMM benchmarks' ablations."""
    from pipeline_core_nvidia_h100 import matmul_call as mm

    def run() -> Any:
        prev, mm.TUNING = mm.TUNING, tuning
        try:
            return fn()
        finally:
            mm.TUNING = prev
    return run


def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A contiguous tensor's strides in elements (a dimension of 0 counted as 1, as torch)."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= max(d, 1)
    return tuple(strides)


def kernel_key(a: Any, b: Any, *, bias: Any = None, activation: str | None = None,
               out_dtype: str | None = None, out: Any = None, scales: Any = None,
               sms: int = 132, store: str | None = None) -> tuple[Any, Any]:
    """(variant, candidate) the untuned call launches for these tensor descriptions
    (gemm_call.TensorInfo); ``store`` overrides the variant's (an out= at an odd address
    stores directly: what a description without an address cannot see)."""
    import attrs

    from pipeline_core_nvidia_h100 import matmul_call as mm

    base = mm.plan_infos(a, b, bias, activation, out_dtype, out, sms, mm.TUNING, scales=scales)
    c = mm.decomposition(base, sms)
    plan = mm.plan_infos(a, b, bias, activation, out_dtype, out, sms, mm.TUNING, c, scales)
    v = plan.variant if store is None else attrs.evolve(plan.variant, store=store)
    return v, c


def prebuild(torch: Any, keys: Any, emit: Any = print) -> None:
    """Every (variant, candidate)'s cubin built in parallel (a bare variant: the default tile),
    then, with ``torch``, loaded on the current device."""
    from pipeline_core_nvidia_h100.autotune import DEFAULT, Candidate
    from pipeline_core_nvidia_h100.gemm_signature import KERNEL_NAME
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.matmul_call import CALL, kernel_source
    from pipeline_core_nvidia_h100.runtime import ARCH

    t0 = time.time()
    pairs = sorted({k if isinstance(k, tuple) and isinstance(k[1], Candidate) else (k, DEFAULT)
                    for k in keys}, key=repr)
    sources = [kernel_source(v, c)[1] for v, c in pairs]
    with ThreadPoolExecutor(max(2, (os.cpu_count() or 2) - 2)) as pool:
        list(pool.map(lambda s: cubin_path(s, KERNEL_NAME, ("-std=c++17",), ARCH), sources))
    if torch is not None:
        for v, c in pairs:
            CALL.kernels.kernel((v, c, torch.cuda.current_device()))
    emit({"kind": "prebuild", "kernels": len(pairs), "seconds": round(time.time() - t0, 1)})

"""The host's time to enqueue one ``attention()`` call, with the kernel launch faked (no GPU).

  python3 benchmarks/attention_host.py [--before FILE] [--calls N] [--rounds R] [--out FILE]

What is timed is everything the call does on the host up to the kernel launch: the custom op's
dispatch or the eager path (docs/guide/attention.md, "The launch path"), the argument checks,
the plan, the tensor maps, the packing of the arguments, CuPy's device and stream contexts; the
kernel itself is a Python no-op, so no GPU runs.  ``--before FILE``: another copy of
``call.py`` (e.g. ``git show 16aecd1:plugins/schedules_attention/pipeline_core_schedules_attention/call.py``,
the call before the eager path), timed in the same process in interleaved rounds; its custom op
is registered as ``pipeline_core_before::attention`` so both can be loaded.

With torch and a CUDA device, real CUDA tensors are used (the tensor maps are encoded for real;
the kernel is still the no-op).  Without torch (a CPU-only machine), a stand-in torch and CuPy
are installed: they have no dispatcher, so the ``before`` figure there leaves out the real custom
op's dispatch cost and understates the gain.  Every result is one JSON line on stdout (and in
--out).  Medians of per-round means, microseconds per call; the figure depends on the machine.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

SHAPE = (16, 16, 1024, 128)  # B = 16384 / S, H = 2048 / D at S=1024, D=128 (issue 27's grid)


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class _Device:
    type, index = "cuda", 0

    def __str__(self) -> str:
        return "cuda:0"


class _Ctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _stand_ins() -> None:
    """A torch and a CuPy with just what the call reads (installed in sys.modules)."""
    torch = types.ModuleType("torch")
    bf16, i16 = _Dtype("bfloat16"), _Dtype("int16")
    ptrs = [1 << 30]

    class Tensor:
        requires_grad, is_cuda, device, dtype = False, True, _Device(), bf16

        def __init__(self, shape: tuple[int, ...]) -> None:
            self.shape = shape
            self.ptr = ptrs[0]
            ptrs[0] += 1 << 28

        def stride(self) -> tuple[int, ...]:
            return (self.shape[1] * self.shape[2] * self.shape[3],
                    self.shape[2] * self.shape[3], self.shape[3], 1)

        def is_contiguous(self) -> bool:
            return True

        def data_ptr(self) -> int:
            return self.ptr

        def view(self, dtype: Any) -> Any:
            return types.SimpleNamespace(__cuda_array_interface__={
                "data": (self.ptr, False), "shape": self.shape, "strides": None,
                "typestr": "<i2"})

    Tensor.__module__ = "torch"
    stream = types.SimpleNamespace(cuda_stream=7)
    ops: dict[str, Any] = {}

    def custom_op(name: str, fn: Any, **kw: Any) -> Any:
        space, op = name.split("::")
        setattr(ops.setdefault(space, types.SimpleNamespace()), op, fn)
        return types.SimpleNamespace(register_fake=lambda fake: None)

    torch.Tensor, torch.bfloat16, torch.int16 = Tensor, bf16, i16  # type: ignore[attr-defined]
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(_len_torch_dispatch_stack=lambda: 0)  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        current_device=lambda: 0, current_stream=lambda device=None: stream,
        get_device_properties=lambda d: types.SimpleNamespace(multi_processor_count=132))
    torch.empty_like = lambda t: Tensor(t.shape)  # type: ignore[attr-defined]
    torch.randn = lambda *shape, **kw: Tensor(shape)  # type: ignore[attr-defined]
    torch.library = types.SimpleNamespace(custom_op=custom_op)  # type: ignore[attr-defined]

    class Ops:
        def __getattr__(self, space: str) -> Any:
            return ops[space]

    torch.ops = Ops()  # type: ignore[attr-defined]
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        ExternalStream=lambda handle: _Ctx(), Device=lambda device: _Ctx())
    sys.modules["torch"], sys.modules["cupy"] = torch, cupy
    import numpy as np

    import pipeline_core_nvidia_h100.tma as tma

    record = np.dtype([("opaque", np.uint64, (16,))], align=True)  # tma.encode_tiled_2d's
    tma.encode_tiled_2d = (  # type: ignore[assignment]
        lambda *a, **kw: np.zeros(1, dtype=record)[0])


def _load_before(path: Path) -> Any:
    text = path.read_text().replace("pipeline_core::attention", "pipeline_core_before::attention")
    text = text.replace("torch.ops.pipeline_core\n", "torch.ops.pipeline_core_before\n")
    name = "pipeline_core_schedules_attention.call_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    exec(compile(text, str(path), "exec"), mod.__dict__)  # noqa: S102 - our own call.py
    return mod


def _put_noop_kernel(mod: Any) -> None:
    """The no-op kernel in ``mod``'s kernel slot for SHAPE: its call layer's table (the kit's
    HostCall), or an older call.py's own ``_KERNELS``."""
    call = getattr(mod, "CALL", None)
    table = call.kernels if call is not None else mod._KERNELS
    built = getattr(mod, "AttentionKernel", None) or mod._Built
    key = (SHAPE[3], "bf16", False, "top_left", SHAPE[2] <= mod.SHORT_KEYS, 0)
    table[key] = built(kernel=_noop_kernel, smem=1, threads=384, block_m=128, block_n=176)


def _noop_kernel(grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
    """The fake launcher: the kernel call, doing nothing."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="", help="another call.py to time beside this one")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        import torch

        real = torch.cuda.is_available()
    except ImportError:
        real = False
    if not real:
        _stand_ins()
        import torch
    from pipeline_core_schedules_attention import call

    mods = {"after": call}
    if args.before:
        mods["before"] = _load_before(Path(args.before))
    dev = "cuda" if real else None
    q, k, v = (torch.randn(*SHAPE, device=dev, dtype=torch.bfloat16) for _ in range(3))
    for mod in mods.values():
        _put_noop_kernel(mod)
        for _ in range(20):  # warm: the op registered, the recipe and the maps cached
            mod.attention(q, k, v)
    per: dict[str, list[float]] = {n: [] for n in mods}
    names = list(mods)
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn = mods[n].attention
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn(q, k, v)
            per[n].append((time.perf_counter() - t0) * 1e6 / args.calls)
    lines = []
    for n in names:
        rec: dict[str, Any] = {"kind": "host", "path": n, "us_per_call": statistics.median(per[n]),
                               "rounds_us": [round(x, 2) for x in per[n]],
                               "torch": torch.__version__ if real else "stand-in",
                               "shape": list(SHAPE), "calls": args.calls}
        if n == "after" and "before" in per:
            rec["ratio_before_over_after"] = [round(b / a, 2)
                                              for a, b in zip(per["after"], per["before"])]
        lines.append(json.dumps(rec))
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

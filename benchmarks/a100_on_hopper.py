#!/usr/bin/env python3
"""The a100 target's multistage-gemm kernel, emitted for sm_80, run on a Hopper GPU (issue 39).

``pipeline-core emit multistage-gemm --target a100`` writes the kernel for the A100's
architecture (the ``cuda`` emitter serves the a100 target by capability and takes ``sm_80``
from its profile).  There is no A100 here, so this script builds that source as PTX for
``compute_80`` (``nvcc -arch=compute_80 -ptx``), loads the PTX, which the driver JIT-compiles
for the GPU it runs on (an H100 / H200), and checks every case against an fp32 torch reference:
fresh random bf16 inputs, the output poisoned with NaN before the launch, and
``||C - ref|| / ||ref|| <= 1e-2`` with no NaN left.  One ``PASS`` / ``FAIL`` line per case; the
exit status is 1 when any case fails.

The kernel takes tile multiples only (``Geometry.check_shape``: no tails), so the shapes are
tile multiples of each variant, from the smallest the ring allows to a few thousand.

  python3 benchmarks/a100_on_hopper.py               # on the GPU: build, JIT, run, check
  python3 benchmarks/a100_on_hopper.py --build-only  # no GPU: emit and build every variant's PTX

Needs the core with plugins/nvidia_h100 and plugins/target_a100 installed, nvcc, and for a run
torch and CuPy (``pip install 'pipeline-core-nvidia-h100[cuda]'``).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: (label, -p params, -T stages): the default tile, a small one, a BK=32 one
VARIANTS: tuple[tuple[str, dict[str, str], int], ...] = (
    ("128x256x64-s3", {}, 3),
    ("64x128x64-s2", {"BM": "64", "BN": "128", "warps_m": "1", "warps_n": "2"}, 2),
    ("128x128x32-s3", {"BM": "128", "BN": "128", "BK": "32", "warps_m": "2", "warps_n": "2"}, 3),
)
#: problem shapes as multiples of the variant's tile: (M tiles, N tiles, K tiles)
SHAPES = ((1, 1, 2), (2, 3, 5), (8, 4, 16), (16, 16, 64))
TOLERANCE = 1e-2
KERNEL = "pc_multistage_gemm"
ARCH, VIRTUAL = "sm_80", "compute_80"


def emit(params: dict[str, str], stages: int) -> tuple[str, Any]:
    """The cuda emitter's source for multistage-gemm on a100, and the geometry it declared."""
    from pipeline_core.plugin_api import compile_named, default_host

    host = default_host()
    compiled = compile_named("multistage-gemm", target="a100", params=params,
                             target_args={"stages": str(stages)}, host=host)
    source = host.emitters["cuda"].emit(compiled)
    if f"// Architecture {ARCH} (target a100)" not in source:
        raise SystemExit(f"the emitted source does not name {ARCH}: is plugins/target_a100 installed?")
    return source, compiled.launch.geometry


def build_ptx(source: str, workdir: Path, label: str) -> Path:
    """``nvcc -arch=compute_80 -ptx``: PTX only, so the driver must JIT it for the GPU."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc is not on PATH")
    cu, ptx = workdir / f"{label}.cu", workdir / f"{label}.ptx"
    cu.write_text(source)
    run = subprocess.run([nvcc, f"-arch={VIRTUAL}", "-ptx", str(cu), "-o", str(ptx)],
                         capture_output=True, text=True)
    if run.returncode or "warning" in run.stderr.lower():
        raise SystemExit(f"nvcc -arch={VIRTUAL} failed for {label}:\n{run.stderr}")
    return ptx


def check_case(kernel: Any, g: Any, shape: tuple[int, int, int], seed: int) -> tuple[bool, str]:
    """One launch on fresh inputs against the fp32 reference; (passed, details)."""
    import torch
    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    m, n, k = shape[0] * g.bm, shape[1] * g.bn, shape[2] * g.bk
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grid = ((m // g.bm) * (n // g.bn),)
    KernelBuilder(()).launch(kernel, grid, (g.threads,), (a, b, c, m, n, k),
                             shared_mem=g.smem_bytes)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    nan = int(torch.isnan(c).sum())
    err = float((c.float() - ref).norm() / ref.norm()) if not nan else float("nan")
    ok = nan == 0 and err <= TOLERANCE
    return ok, f"M={m} N={n} K={k}: rel err {err:.2e}, NaN left {nan}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-only", action="store_true",
                        help="emit and build every variant's PTX; no GPU needed")
    args = parser.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, params, stages in VARIANTS:
            source, g = emit(params, stages)
            ptx = build_ptx(source, Path(tmp), label)
            if args.build_only:
                print(f"BUILT {label}: {ptx.stat().st_size} bytes of PTX for {VIRTUAL}")
                continue
            import cupy as cp
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
            kernel = cp.RawModule(path=str(ptx)).get_function(KERNEL)  # the driver JITs the PTX
            from pipeline_core_nvidia_h100.runtime import KernelBuilder

            KernelBuilder.set_max_dynamic_shared(kernel, g.smem_bytes)
            major, minor = torch.cuda.get_device_capability()
            for i, shape in enumerate(SHAPES):
                if shape[2] < stages - 1:
                    continue
                ok, details = check_case(kernel, g, shape, seed=1000 * i + stages)
                failed += not ok
                print(f"{'PASS' if ok else 'FAIL'} {label} on sm_{major}{minor} "
                      f"(PTX {VIRTUAL}, JIT): {details}", flush=True)
    if failed:
        print(f"{failed} case(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

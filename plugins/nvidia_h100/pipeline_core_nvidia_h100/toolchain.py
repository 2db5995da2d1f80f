"""Where the CUDA tools are: nvcc for compiling emitted kernels, a disassembler for their SASS.

The tests (and a user checking an emitted kernel without a GPU) read the machine code to see
that each derived wait became ``DEPBAR.LE SB0, n``.  ``nvdisasm`` may be on PATH, named by
``$NVDISASM``, or shipped by the ``nvidia-cuda-nvdisasm`` wheel (the plugin's ``test``
extra); ``cuobjdump -sass`` does the same job where a CUDA toolkit has it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: the compile target of the emitted kernels (wgmma-era Hopper, sm_90a)
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"


def nvcc() -> str | None:
    """The nvcc on PATH, or None."""
    return shutil.which("nvcc")


def sass_command() -> list[str] | None:
    """A command that prints a cubin's SASS when the cubin's path is appended, or None."""
    for candidate in (os.environ.get("NVDISASM"), shutil.which("nvdisasm")):
        if candidate and Path(candidate).is_file():
            return [candidate, "-c"]
    try:
        import nvidia  # namespace package of NVIDIA's wheels (nvidia-cuda-nvdisasm)
    except ImportError:
        nvidia = None
    for root in getattr(nvidia, "__path__", ()):
        for found in sorted(Path(root).glob("*/bin/nvdisasm")):
            return [str(found), "-c"]
    cuobjdump = shutil.which("cuobjdump")
    return [cuobjdump, "-sass"] if cuobjdump else None


def compile_cubin(source: str, workdir: Path, name: str = "kernel",
                  flags: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Build emitted CUDA ``source`` into ``workdir/name.cubin`` for sm_90a with ptxas's resource
    report (``-Xptxas=-v``: registers, spills, notes such as C7520 in the result's stderr); the
    one build the SASS tests and a user checking a kernel run.  The caller checks the result."""
    cu, cubin = workdir / f"{name}.cu", workdir / f"{name}.cubin"
    cu.write_text(source)
    proc = subprocess.run([nvcc() or "nvcc", "-cubin", GENCODE, "-std=c++17", "-Xptxas=-v",
                           *flags, "-o", str(cubin), str(cu)], capture_output=True, text=True)
    return proc, cubin


def sass_of(cubin: Path) -> str | None:
    """The SASS of ``cubin``, or None where no disassembler is found (:func:`sass_command`)."""
    tool = sass_command()
    if tool is None:
        return None
    return subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout

"""Built kernels on disk, so a second process does not rebuild them (``PIPELINE_CORE_CACHE_DIR``).

A cubin is stored under a key over the kernel's source, its name, the build options, the
architecture and the toolkit that built it (``nvcc --version``): any of them changing builds a
new one, as Triton's cache does.  The directory is ``$PIPELINE_CORE_CACHE_DIR`` or
``~/.cache/pipeline-core`` (``$XDG_CACHE_HOME`` when set); a cubin is written to a temporary
name and renamed, so concurrent processes never read half a file.  Without ``nvcc`` on PATH the
kernel is built in memory through NVRTC (CuPy's own cache then applies).  docs/guide/matmul.md.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from pipeline_core_nvidia_h100.toolchain import GENCODE, nvcc

ENV = "PIPELINE_CORE_CACHE_DIR"


def cache_dir() -> Path:
    """Where built kernels live: ``$PIPELINE_CORE_CACHE_DIR``, else the user's cache folder."""
    explicit = os.environ.get(ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pipeline-core"


def kernel_key(source: str, name: str, options: Sequence[str], arch: str, toolkit: str) -> str:
    """The cache key of one build: sha256 over every input that changes the machine code."""
    h = hashlib.sha256()
    for part in (source, name, *options, arch, toolkit):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def toolkit_version() -> str:
    """The last line of ``nvcc --version`` (its build id), or "" without nvcc."""
    tool = nvcc()
    if tool is None:
        return ""
    proc = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def cubin_path(source: str, name: str, options: Sequence[str], arch: str,
               announce: Callable[[str], None] | None = None) -> Path | None:
    """The cached cubin of this build, built now with nvcc if missing (``announce`` is told
    first, with the path it will write); None without nvcc."""
    tool, toolkit = nvcc(), toolkit_version()
    if tool is None or not toolkit:
        return None
    folder = cache_dir()
    path = folder / f"{kernel_key(source, name, options, arch, toolkit)}.cubin"
    if path.is_file():
        return path
    if announce is not None:
        announce(f"building kernel {name} with nvcc into {path} (once: later processes load it)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(source, encoding="utf-8")
        out = Path(tmp) / "kernel.cubin"
        proc = subprocess.run([tool, "-cubin", GENCODE, *options, "-o", str(out), str(cu)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc could not build kernel {name}: "
                               f"{proc.stderr.strip().splitlines()[-1:]}")
        os.replace(out, path)
    return path

"""Built kernels on disk, so a second process does not rebuild them (``PIPELINE_CORE_CACHE_DIR``).

A cubin is stored under a key over the kernel's source, its name, the build options, the
architecture and the toolkit that built it (``nvcc --version``): any of them changing builds a
new one, as Triton's cache does.  The directory is ``$PIPELINE_CORE_CACHE_DIR`` or
``~/.cache/pipeline-core`` (``$XDG_CACHE_HOME`` when set); a cubin is written to a temporary
name and renamed, so concurrent processes never read half a file.  Beside each cubin lies the
sha256 of its bytes (``KEY.sha256``): a cubin that does not match it (a disk or copy that
corrupted it, a half-written file from elsewhere, one cached before the digests) is built again
rather than loaded as it is forever.  A folder that cannot be made (the variable naming a
file) is one :class:`CacheDirError` naming the variable.  Without ``nvcc`` on PATH the
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


class CacheDirError(ValueError):
    """The cache folder cannot be made or used (``PIPELINE_CORE_CACHE_DIR`` names a file, a
    folder without write permission): one line naming it and the fix, not the bare
    ``FileExistsError`` that ``mkdir`` raises into the call."""


def ensure_folder(folder: Path) -> Path:
    """``folder`` (the cache folder, or one the caller keeps under it) made if missing."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        explicit = os.environ.get(ENV)
        where = (f"{ENV}={explicit}" if explicit and folder == cache_dir()
                 else f"the cache folder {folder}")
        why = ("names a file, not a folder" if isinstance(exc, (FileExistsError, NotADirectoryError))
               else f"cannot be made ({exc.strerror or exc})")
        raise CacheDirError(f"{where} {why}: set {ENV} to a folder you can write, e.g. "
                            f"export {ENV}=$HOME/.cache/pipeline-core") from None
    return folder


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
    """The cached cubin of this build, built now with nvcc if missing or if its bytes fail
    their sha256 (``announce`` is told first, with the path it will write); None without
    nvcc."""
    tool, toolkit = nvcc(), toolkit_version()
    if tool is None or not toolkit:
        return None
    folder = ensure_folder(cache_dir())
    path = folder / f"{kernel_key(source, name, options, arch, toolkit)}.cubin"
    if path.is_file():
        if sound(path):
            return path
        if announce is not None:
            announce(f"cached kernel {path} does not match its sha256; building it again")
    if announce is not None:
        announce(f"building kernel {name} with nvcc into {path} (once: later processes load it)")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(source, encoding="utf-8")
        out = Path(tmp) / "kernel.cubin"
        proc = subprocess.run([tool, "-cubin", GENCODE, *options, "-o", str(out), str(cu)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc could not build kernel {name}: "
                               f"{proc.stderr.strip().splitlines()[-1:]}")
        digest = Path(tmp) / "kernel.sha256"
        digest.write_text(hashlib.sha256(out.read_bytes()).hexdigest() + "\n", encoding="ascii")
        # the digest first: between the renames a reader finds it beside no cubin, or beside
        # bytes it does not match, and builds; no reader trusts a cubin without its digest
        os.replace(digest, digest_path(path))
        os.replace(out, path)
    return path


def digest_path(cubin: Path) -> Path:
    """Where the sha256 of ``cubin``'s bytes is kept: beside it, ``KEY.sha256``."""
    return cubin.with_suffix(".sha256")


def sound(cubin: Path) -> bool:
    """Whether ``cubin``'s bytes match the sha256 kept beside it (False without one)."""
    try:
        data = cubin.read_bytes()
        kept = digest_path(cubin).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return hashlib.sha256(data).hexdigest() == kept

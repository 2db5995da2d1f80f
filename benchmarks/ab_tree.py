"""An earlier commit's core and Hopper plugins under other module names, so that one process can
import both it and this checkout and time them side by side (benchmarks/kit_ab.py):

  python3 benchmarks/ab_tree.py COMMIT DEST [--prefix abold_]

writes DEST/{prefix}pipeline_core, DEST/{prefix}pipeline_core_nvidia_h100 and
DEST/{prefix}pipeline_core_schedules_attention from ``git archive COMMIT``, every Python
file's ``pipeline_core`` names (modules, the custom ops' ``pipeline_core::`` namespace) prefixed,
so nothing the two trees register collides.  Headers and package data are copied as they are.
"""
from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

PACKAGES = {"pipeline_core": "pipeline_core",
            "plugins/nvidia_h100/pipeline_core_nvidia_h100": "pipeline_core_nvidia_h100",
            "plugins/schedules_attention/pipeline_core_schedules_attention":
                "pipeline_core_schedules_attention"}


def build(commit: str, dest: Path, prefix: str) -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", "--format=tar", commit, *PACKAGES], cwd=root,
                             check=True, capture_output=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            src = next(s for s in PACKAGES if member.name == s or member.name.startswith(s + "/"))
            rel = member.name[len(src):].lstrip("/")
            target = dest / (prefix + PACKAGES[src]) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            if target.suffix == ".py":
                data = re.sub(rb"\bpipeline_core", prefix.encode() + b"pipeline_core", data)
            target.write_bytes(data)
            out.append(target)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("commit")
    ap.add_argument("dest", type=Path)
    ap.add_argument("--prefix", default="abold_")
    args = ap.parse_args()
    for name in PACKAGES.values():
        shutil.rmtree(args.dest / (args.prefix + name), ignore_errors=True)
    files = build(args.commit, args.dest, args.prefix)
    print(f"{len(files)} files of {args.commit} under {args.dest} (prefix {args.prefix})")


if __name__ == "__main__":
    main()

"""Test helpers for the MI355X plugins: golden documents and the real CLI in a subprocess.

The reference's golden documents are test data of the pipeline-core repository
(``tests/goldens/``, layout in ``docs/document-format.md``); ``$PIPELINE_CORE_GOLDENS``
points elsewhere.  Importing this module needs no pytest: the fixtures built on it are in
:mod:`pipeline_core_amd_mi355x.fixtures`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

#: Keys docs/document-format.md marks as compared, for every case and for double-buffer cases.
COMMON_KEYS = ("counts", "warp_stagger_index", "config", "body", "edges", "prologue", "kernel",
               "epilogue", "kernel_deps")
DOUBLE_BUFFER_KEYS = ("schedule_config", "wait_lgkm_first", "wait_vm_last", "blocks")


#: Where the golden documents sit inside a pipeline-core checkout.
REPOSITORY_GOLDENS = Path("tests") / "goldens"


def goldens_dir(repository: Path | None = None) -> Path:
    """``$PIPELINE_CORE_GOLDENS`` if set, else ``tests/goldens`` of the repository checkout.

    Raises FileNotFoundError naming the directory it looked in: a missing golden directory
    must fail a parity test, never skip it.
    """
    env = os.environ.get("PIPELINE_CORE_GOLDENS")
    where = Path(env) if env else (repository or Path.cwd()) / REPOSITORY_GOLDENS
    if not (where.is_dir() and any(where.glob("*.json"))):
        hint = "" if env else " (set PIPELINE_CORE_GOLDENS, or run from the repository root)"
        raise FileNotFoundError(f"no golden documents in {where}{hint}")
    return where


@lru_cache(maxsize=None)
def load_golden(case: str, directory: Path | None = None) -> dict:
    """One golden document, parsed (``directory`` defaults to :func:`goldens_dir`)."""
    return json.loads(((directory or goldens_dir()) / f"{case}.json").read_text())


#: what a golden's command line needs to reproduce the reference exactly: ``--allow-unsafe``
#: emits the reference's output even where it races (docs/guide/checker.md, "Compile proves what it emits");
#: the 4-wave goldens need it, the others are proven safe as they are
REFERENCE_FLAGS = ("--allow-unsafe",)


def cli_command() -> list[str]:
    """The installed console script of this interpreter's environment (as a user runs it)."""
    exe_dir = Path(sys.executable).parent
    for name in ("pipeline-core", "pipeline-core.exe"):
        if (exe_dir / name).exists():
            return [str(exe_dir / name)]
    found = shutil.which("pipeline-core")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from pipeline_core.cli import main; sys.exit(main())"]


def run_pipeline_core(argv: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``pipeline-core argv`` in a subprocess and capture its output."""
    return subprocess.run(cli_command() + list(argv), capture_output=True, text=True,
                          timeout=timeout)


def compile_json(argv: Sequence[str]) -> dict:
    """``pipeline-core <argv> --format json`` parsed; fails loudly with stderr on error."""
    argv = list(argv)
    if "--format" not in argv:
        argv += ["--format", "json"]
    run = run_pipeline_core(argv)
    if run.returncode != 0:
        raise AssertionError(f"exit {run.returncode}: {' '.join(argv)}\n{run.stderr}")
    return json.loads(run.stdout)


def diff(expected: Any, got: Any, path: str = "", limit: int = 20) -> list[str]:
    """Field-by-field differences (expected, got), the comparison the golden tests make."""
    out: list[str] = []

    def walk(e, g, p):
        if len(out) >= limit:
            return
        if isinstance(e, dict):
            if not isinstance(g, dict):
                out.append(f"{p}: expected an object, got {g!r}")
                return
            for k, v in e.items():
                if k not in g:
                    out.append(f"{p}.{k}: missing")
                else:
                    walk(v, g[k], f"{p}.{k}")
        elif isinstance(e, list):
            if not isinstance(g, list):
                out.append(f"{p}: expected a list, got {g!r}")
                return
            if len(e) != len(g):
                out.append(f"{p}: expected {len(e)} items, got {len(g)}")
            for i, (a, b) in enumerate(zip(e, g)):
                walk(a, b, f"{p}[{i}]")
        elif type(e) is not type(g) or e != g:
            out.append(f"{p}: expected {e!r}, got {g!r}")

    walk(expected, got, path)
    return out


def compared_keys(doc: dict) -> tuple[str, ...]:
    keys: tuple[str, ...] = COMMON_KEYS
    if doc["config"]["depth"] >= 2:
        keys += DOUBLE_BUFFER_KEYS
    return keys


def golden_diffs(golden: dict, got: dict, limit: int = 20) -> list[str]:
    """Every compared key of docs/document-format.md, plus scheduler.order for double-buffer cases."""
    out: list[str] = []
    for key in compared_keys(golden):
        if key not in got:
            out.append(f"{key}: missing")
        else:
            out += diff(golden[key], got[key], key, limit)
    if golden["config"]["depth"] >= 2:
        order = (got.get("scheduler") or {}).get("order")
        if order != golden["scheduler"]["order"]:
            out.append(f"scheduler.order: expected {golden['scheduler']['order']}, got {order}")
    return out[:limit]


def same_schedule_diffs(a: dict, b: dict, limit: int = 20) -> list[str]:
    """Differences between two of our outputs on every compared key."""
    return golden_diffs(a, b, limit)


def compiler_for(schedule: str | None = None):
    """``run(params=..., target_args=..., overrides=..., target=...)`` compiling by name.

    Values may be any type (they are passed as the CLI's strings).  With ``schedule``
    None, the schedule name is the first positional argument of ``run``.
    """
    from pipeline_core.plugin_api import compile_named

    def strings(d):
        return {k: str(v) for k, v in (d or {}).items()}

    def run(*args, params=None, target_args=None, overrides=None, target=None,
            allow_unsafe=False, **kw_params):
        name = schedule if schedule is not None else args[0]
        chosen = {**strings(params), **strings(kw_params)}
        return compile_named(name, target=target, params=chosen, target_args=strings(target_args),
                             config_overrides=strings(overrides), allow_unsafe=allow_unsafe)
    return run

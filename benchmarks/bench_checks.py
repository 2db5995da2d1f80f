"""What the attention GPU checks (attention_varlen.py, attention_window.py,
attention_headdims.py) share, and the GEMM timing scripts that take their records
(gemm_mid.py, gemm_wide_tiles.py: :func:`timing_args`): their
records (:func:`emit`: one JSON line on stdout, and in each file of :data:`SINK`), and
compute-sanitizer's racecheck and synccheck over a check's own small runs (:func:`sanitized`:
the script is run again under each tool with ``--phase sanitize-run``, which prints one
``{"kind": "sanitized-run", ...}`` line per call)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from attention_checks import _job, _sanitizer  # beside this script

#: where every record also goes (a check's --out), when given
SINK: list[Path] = []


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)
    for path in SINK:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def timing_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """A timing script's command line: ``ap``'s own flags, ``--rounds`` and ``--out`` (a results
    .jsonl, emptied, then every :func:`emit` record written there too, line by line)."""
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="a results .jsonl to write")
    args = ap.parse_args()
    if args.out:
        args.out.write_text("")
        SINK.append(args.out)
    return args


def sanitized(script: Path, runs_expected: int, out: Path | None, timeout: float) -> bool:
    """Whether both tools ran ``script``'s sanitize runs clean: exit 0, every run there
    (``runs_expected``), none with NaN or not ok, the tool's summary 0 hazards / errors; one
    record per tool."""
    me = [sys.executable, str(script.resolve()), "--phase", "sanitize-run"]
    clean = True
    for tool in ("racecheck", "synccheck"):
        rc, text, secs = _job(("sanitize", tool), [_sanitizer(), "--tool", tool,
                                                   "--kernel-name", "kns=pc_", *me],
                              timeout, out)
        runs = [json.loads(r) for r in re.findall(r'^\{"kind": "sanitized-run".*$', text, re.M)]
        summary = sorted(set(re.findall(r"(RACECHECK SUMMARY: .*|ERROR SUMMARY: .*)", text)))
        nan = any(r["nan"] for r in runs)
        ok = (rc == 0 and len(runs) == runs_expected and not nan
              and all(r.get("ok", True) for r in runs) and bool(summary)
              and all("0 hazards" in s or "0 errors" in s for s in summary))
        clean &= ok
        emit({"kind": "sanitizer", "tool": tool, "rc": rc, "kernel_runs": len(runs),
              "summary": summary, "nan": nan, "ok": ok, "seconds": round(secs)})
    return clean


def check_args(phases: tuple[str, ...], sink: str,
               numbers: tuple[tuple[str, type, Any], ...]) -> argparse.Namespace:
    """A check's command line: ``--phase`` (``phases``, the first the default), ``--sanitize``,
    ``--prebuild-only`` and ``--dry-run``, ``numbers`` (flag, type, default) and ``--out``, whose
    directory is made and its file ``sink`` put in :data:`SINK`."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default=phases[0], choices=phases)
    for flag, why in (("--sanitize", "racecheck and synccheck"),
                      ("--prebuild-only", "no GPU: build every cubin"),
                      ("--dry-run", "no torch: print the cases")):
        ap.add_argument(flag, action="store_true", help=why)
    for flag, kind, default in (*numbers, ("--out", str, "")):
        ap.add_argument(flag, type=kind, default=default)
    args = ap.parse_args()
    args.out = Path(args.out) if args.out else None
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        SINK.append(args.out / sink)
    return args


def each_case(cases: Sequence[tuple], check: Callable[[tuple], dict]) -> bool:
    """Each case's record (``check(case)``, its ``ok``; an exception is one failing record with
    its first line, and the run goes on), then a summary; whether every case passed."""
    ok = 0
    for case in cases:
        try:
            rec = check(case)
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            rec = {"kind": "case", "case": repr(case), "ok": False,
                   "fails": [f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"]}
        emit(rec)
        ok += rec["ok"]
    emit({"kind": "correct-summary", "cases": len(cases), "passed": ok})
    return ok == len(cases)


def prebuild(keys: list[tuple], build: Callable[[tuple], bool], jobs: int,
             initializer: Callable[..., None] | None = None,
             initargs: tuple[Any, ...] = ()) -> bool:
    """Whether ``build`` put every kernel of ``keys`` into the disk cache (``jobs`` at once);
    one record."""
    with ProcessPoolExecutor(jobs, initializer=initializer, initargs=initargs) as pool:
        built = sum(pool.map(build, keys))
    emit({"kind": "prebuild", "kernels": len(keys), "built": built})
    return built == len(keys)


def dispatch(args: argparse.Namespace, script: Path, cases: Sequence[tuple], sanitize_runs: int,
             prebuild: Callable[[], Any], sanitize_run: Callable[[Any], None],
             gpu: Callable[[Any], dict[str, Any]]) -> None:
    """A check's flow after its command line (:func:`check_args`): ``--dry-run`` prints
    ``cases``, ``--prebuild-only`` runs ``prebuild`` (no GPU), ``--sanitize`` runs both tools
    over the script's ``sanitize_runs`` runs (:func:`sanitized`), ``--phase sanitize-run``
    those runs (``sanitize_run(torch)``), else one device record, ``gpu(torch)``'s phases and
    the summary line from what it returns (its bools decide PASS or FAIL)."""
    if args.dry_run:
        for case in cases:
            emit({"kind": "dry-run", "case": repr(case)})
        return
    if args.prebuild_only:
        prebuild()
        return
    if args.sanitize:
        clean = sanitized(script, sanitize_runs, args.out, args.timeout)
        emit({"kind": "summary", "result": "PASS" if clean else "FAIL",
              "sanitizers_clean": clean})
        return
    import torch  # type: ignore[import-not-found, unused-ignore]

    torch.manual_seed(args.seed)
    if args.phase == "sanitize-run":
        sanitize_run(torch)
        return
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    results = gpu(torch)
    ok = all(v for v in results.values() if isinstance(v, bool))
    emit({"kind": "summary", "result": "PASS" if ok else "FAIL", **results})


def run_check(script: Path, sink: str, cases: Sequence[tuple], sanitize_runs: int,
              keys: Callable[[], list[tuple]], build: Callable[[tuple], bool],
              correct: Callable[[Any], bool], timing: Callable[[Any, int], None],
              sanitize_run: Callable[[Any], None]) -> None:
    """A forward check's command line and flow (attention_window.py, attention_headdims.py):
    ``--dry-run`` prints ``cases`` and the kernels' count (no torch), ``--prebuild-only``
    builds ``keys()`` with ``build`` (no GPU), ``--sanitize`` runs :func:`sanitized` over the
    script's ``sanitize_runs`` runs, ``--phase sanitize-run`` those runs, else ``correct`` and
    ``timing`` (``--phase``); the last line one summary, PASS or FAIL."""
    args = check_args(("all", "correct", "time", "sanitize-run"), sink,
                      (("--rounds", int, 5), ("--seed", int, 0), ("--jobs", int, 2),
                       ("--timeout", float, 600.0)))
    if args.dry_run:
        emit({"kind": "dry-run-kernels", "cases": len(cases), "kernels": len(keys())})

    def built() -> None:
        ok = prebuild(keys(), build, args.jobs)
        emit({"kind": "summary", "result": "PASS" if ok else "FAIL", "prebuild": ok})

    def gpu(torch: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if args.phase in ("all", "correct"):
            out["correct"] = correct(torch)
        if args.phase in ("all", "time"):
            timing(torch, args.rounds)
        return {**out, "cases": len(cases)}
    dispatch(args, script, cases, sanitize_runs, built, sanitize_run, gpu)

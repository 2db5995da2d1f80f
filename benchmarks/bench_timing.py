"""The benchmarks' one timing loop (the device's METHOD.md; README, "GPU figures are honest"):
CUDA-event medians after warm-up, in interleaved rounds with the order rotated, so a clock that
drifts between rounds drifts for every implementation alike and the per-round ratios cancel it.

Every GPU script in ``benchmarks/`` times through :func:`interleaved` (a script run as
``python3 benchmarks/X.py`` finds this module beside it).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any


def events_ms(torch: Any, fn: Callable[[], Any], reps: int = 20, warmup: int = 3) -> float:
    """The median of ``reps`` CUDA-event timings of ``fn`` (ms), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for start, end in ev:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def interleaved(torch: Any, impls: Mapping[str, Callable[[], Any]], rounds: int,
                reps: int = 20, warmup: int = 3) -> dict[str, list[float]]:
    """Each implementation's median time (ms) per round; round r starts at the r-th name."""
    names = list(impls)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            per[name].append(events_ms(torch, impls[name], reps, warmup))
    return per


def ratios(per: Mapping[str, list[float]], ours: str, peer: str) -> list[float]:
    """Per-round speed of ``ours`` against ``peer`` (above 1: ours is faster)."""
    return [round(p / o, 3) for o, p in zip(per[ours], per[peer])]


def graphed(torch: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """The replay of a CUDA graph of one call of ``fn``, warmed on a side stream first (a
    call's per-stream state, split-K's workspace, is made there): the GPU's time alone.

    The replay keeps ``fn`` (and so what its closure holds) alive: a graph reads the addresses
    it captured, and a lambda whose default arguments held the only references to its inputs
    would otherwise let them be freed and reused while the graph still reads them, which shows
    up as an illegal address in a later replay, not as a wrong kernel (session 16 lost time to
    exactly that)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            fn()
    torch.cuda.current_stream().wait_stream(side)

    def replay() -> None:
        g.replay()

    replay.keeps = (g, fn)  # type: ignore[attr-defined]  # the graph and its inputs, alive
    return replay


def warm_and_check(torch: Any, impls: Mapping[str, Callable[[], Any]], out: Any, ref: Any,
                   tol: float) -> list[tuple[str, float]]:
    """Each implementation run once into NaN-poisoned ``out`` (its warm-up: builds,
    autotuning) and checked against ``ref``: the (name, relative error) of each above ``tol``."""
    bad = []
    for name, fn in impls.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = float((out.float() - ref).norm() / ref.norm())
        if not err < tol:
            bad.append((name, err))
    return bad

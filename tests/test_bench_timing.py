"""benchmarks/bench_timing.py, the benchmarks' one timing loop, without a GPU (a stand-in
``torch.cuda`` whose events read a counter the timed calls advance): each implementation gets one
median per round, rounds rotate who goes first, and warm-up calls are not timed."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

SPEC = importlib.util.spec_from_file_location(
    "bench_timing", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_timing.py")
assert SPEC is not None and SPEC.loader is not None
bench_timing = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_timing)


def fake_torch(now: list[float]) -> SimpleNamespace:
    class Event:
        def __init__(self, enable_timing: bool) -> None:
            self.at = 0.0

        def record(self) -> None:
            self.at = now[0]

        def elapsed_time(self, end: "Event") -> float:
            return end.at - self.at

    return SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: None))


def test_rounds_rotate_the_order_and_time_only_the_timed_calls():
    now, calls = [0.0], []

    def impl(name: str, ms: float):
        def run() -> None:
            calls.append(name)
            now[0] += ms
        return run

    impls = {"a": impl("a", 1.0), "b": impl("b", 2.0), "c": impl("c", 4.0)}
    per = bench_timing.interleaved(fake_torch(now), impls, rounds=4, reps=5, warmup=2)
    assert per == {"a": [1.0] * 4, "b": [2.0] * 4, "c": [4.0] * 4}
    firsts = [calls[r * 3 * 7] for r in range(4)]  # 7 calls (2 warm-up + 5 timed) per turn
    assert firsts == ["a", "b", "c", "a"]
    assert bench_timing.ratios(per, "a", "c") == [4.0] * 4

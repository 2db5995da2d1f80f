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


def test_a_graphed_call_keeps_its_inputs_alive_while_the_graph_can_replay():
    """The graph reads the addresses it captured: the replay holds ``fn`` (so its closure's
    inputs) for as long as it lives, or a caller whose lambda held the only reference to its
    inputs sees them freed and reused under the graph (an illegal address on the GPU)."""
    import contextlib
    import gc
    import weakref

    class Graph:
        def __init__(self) -> None:
            self.replays = 0

        def replay(self) -> None:
            self.replays += 1

    class Stream:
        def wait_stream(self, other: object) -> None:
            pass

    graphs: list[Graph] = []

    def graph(g: Graph, stream: object) -> contextlib.AbstractContextManager[None]:
        graphs.append(g)
        return contextlib.nullcontext()

    torch = SimpleNamespace(cuda=SimpleNamespace(
        Stream=Stream, current_stream=Stream, stream=lambda s: contextlib.nullcontext(),
        CUDAGraph=Graph, graph=graph))

    class Inputs:
        pass

    inputs = Inputs()
    alive = weakref.ref(inputs)
    runs: list[int] = []
    replay = bench_timing.graphed(torch, lambda held=inputs: runs.append(id(held)))
    del inputs
    gc.collect()
    assert alive() is not None and len(runs) == 2  # warm-up and capture
    replay()
    assert graphs[0].replays == 1
    del replay
    gc.collect()
    assert alive() is None

"""The attention benchmarks' variants without a GPU: ``attention_call.params_over`` and
``each_variant`` put a variant's parameters over the call's own choice and restore it, also
when the timed block fails, and ``attention_tiles.variant`` sets and drops a causal tile order
the same way (benchmarks/attention_call.py, benchmarks/attention_tiles.py)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    if str(BENCH) not in sys.path:  # the scripts import their neighbours (bench_timing, ...)
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_call():
    return SimpleNamespace(CALL_PARAMS={"consumers": "3"}, CALL=SimpleNamespace(kernels={"old": 1}),
                           ORDER=None)


def test_params_over_restores_the_calls_own_choice_even_when_the_block_fails():
    ac = _load("attention_call")
    call = fake_call()
    with pytest.raises(RuntimeError):
        with ac.params_over(call, {"consumers": "2", "stages": "3"}):
            assert call.CALL_PARAMS == {"consumers": "2", "stages": "3"}
            raise RuntimeError("a refused variant")
    assert call.CALL_PARAMS == {"consumers": "3"}


def test_each_variant_yields_each_with_its_parameters_and_no_kernel_of_another():
    ac = _load("attention_call")
    call = fake_call()
    seen = []
    for name in ac.each_variant(call, ["ours-intra", "ours-neither"]):
        assert call.CALL.kernels == {}  # built afresh for this variant
        seen.append((name, dict(call.CALL_PARAMS)))
        call.CALL.kernels["built"] = name
    assert [n for n, _ in seen] == ["ours-intra", "ours-neither"]
    assert seen[1][1] == {"consumers": "3", **ac.VARIANTS["ours-neither"]}
    assert call.CALL_PARAMS == {"consumers": "3"} and call.CALL.kernels == {}


def test_a_tiles_variant_sets_its_order_and_parameters_and_drops_both():
    tiles = _load("attention_tiles")
    call = fake_call()
    with tiles.variant(call, "order16s"):
        assert (call.ORDER.hg, call.ORDER.snake) == (16, True)
        assert "order" not in call.CALL_PARAMS  # an order is no schedule parameter
    assert call.ORDER is None and call.CALL_PARAMS == {"consumers": "3"}
    with tiles.variant(call, "bn128-q2"):
        assert call.ORDER is None
        assert call.CALL_PARAMS == {"consumers": "3", **tiles.VARIANTS["bn128-q2"]}
    assert call.CALL_PARAMS == {"consumers": "3"}

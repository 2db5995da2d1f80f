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


def test_the_strided_checks_cover_every_layout_head_dim_dtype_and_causal_mode():
    """attention_call's and attention_bwd's --phase strides (issue 37): each layout at both
    head dims, both dtypes and the three causal modes, with tails, Sq != Sk and grouped-query
    heads; a case that raises is one line and the run goes on."""
    layouts = _load("attention_layouts")
    cases = layouts.strided_cases()
    assert {(c[0], c[6], c[7], c[8]) for c in cases} == {
        (k, d, t, m) for k in layouts.LAYOUTS for d in (64, 128) for t in ("bf16", "fp16")
        for m in (False, "top_left", "bottom_right")}
    for kind in layouts.LAYOUTS:
        mine = [c for c in cases if c[0] == kind]
        assert any(c[4] != c[5] for c in mine) and any(c[2] != c[3] for c in mine)
        assert {c[4] for c in mine} == {77, 1000}  # tails of both block sizes
    assert layouts.operand_layouts("mixed") == ("bshd", "contiguous", "heads", "copy")
    seen = []

    def run(case):
        if case[0] == "copy":
            raise RuntimeError("a failure\nsecond line")
        return {"ok": True}
    done = layouts.run_all(cases, run, seen.append, "strided")
    assert len(done) == len(seen) == len(cases) == 60 and done[0] == {"ok": True}
    bad = [r for r in done if not r["ok"]]
    assert bad and all(r["error"] == "RuntimeError: a failure" for r in bad)


class _Strided:
    def __init__(self, shape, strides):
        self.shape, self._strides = tuple(shape), tuple(strides)

    def stride(self):
        return self._strides

    def dim(self):
        return len(self.shape)

    def permute(self, *dims):
        return _Strided([self.shape[d] for d in dims], [self._strides[d] for d in dims])

    def is_contiguous(self):
        step = 1
        for n, s in zip(reversed(self.shape), reversed(self._strides)):
            if n > 1 and s != step:
                return False
            step *= n
        return True


def test_an_output_in_its_inputs_layout_is_dense_in_its_dimension_order():
    layouts = _load("attention_layouts")
    b, h, s, d = 2, 4, 77, 64
    bshd = _Strided((b, h, s, d), (s * h * d, d, h * d, 1))
    contiguous = _Strided((b, h, s, d), (h * s * d, s * d, d, 1))
    heads = _Strided((b, h, s, d), (2 * h * s * d, 2 * s * d, d, 1))
    assert layouts.same_layout(bshd, bshd) and not layouts.same_layout(contiguous, bshd)
    assert layouts.same_layout(contiguous, heads) and not layouts.same_layout(heads, heads)

"""Counter models: the AMD default built from a document, and plugged-in semantics."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.check import CounterModel, CounterSpec, OpCount, check_document, default_counter_model
from pipeline_core.check.counters import LGKM, VM

from .helpers import TESTCFG, load


@pytest.mark.parametrize("case,vm,lgkm,notes", [
    ("pingpong_bf16", (2, 2), (8, 4), 0),  # lgkm from schedule_config (type parameters)
    ("fourwave_fp8", (2, 2), (4, 4), 0),  # lgkm from config (geometry)
    ("fourwave_fp8_bm64", (1, 1), (2, 2), 0),
    (TESTCFG, (4, 4), (1, 1), 2),  # both 0: 1 per fragment load assumed, and said so
])
def test_default_model(case, vm, lgkm, notes):
    m = default_counter_model(load(case))
    assert (m.cost(0, 0).ops, m.cost(0, 1).ops) == vm
    assert (m.cost(2, 0).ops, m.cost(2, 1).ops) == lgkm
    assert len(m.notes) == notes
    assert m.counter_for_wait(129).name == VM and m.counter_for_wait(130).name == LGKM
    assert m.counter_for_wait(128) is None and not m.barrier_drains and m.global_loads_write_lds
    assert m.lds_in_order  # the AMD default assumes in-order LDS; a bare record does not
    assert not CounterModel(m.counters, m.costs).lds_in_order
    assert m.summary()["lds_in_order"] is True


def test_single_buffer_model():
    m = default_counter_model(load("default_matmul"))
    assert m.barrier_drains and not m.global_loads_write_lds and m.cost(1, 0).counter == LGKM


def test_counts_must_be_positive():
    with pytest.raises(ValueError):
        OpCount(0, 0, VM, 0)


def _with(model: CounterModel, **in_order) -> CounterModel:
    return attrs.evolve(model, counters=tuple(CounterSpec(c.name, c.wait_tag, in_order.get(c.name, c.in_order))
                                              for c in model.counters))


def test_out_of_order_lgkm_makes_partial_waits_useless():
    """A target whose lgkm ops retire in any order (and whose LDS does not service accesses in
    arrival order): wait_lgkm(8) no longer retires FB0."""
    doc = load("pingpong_bf16")
    ooo = _with(default_counter_model(doc), lgkm=False)
    v = check_document(doc, model=attrs.evolve(ooo, lds_in_order=False))
    assert not v.safe and v.first.kind.value == "LDS_WAR"
    assert v.first.fix.value == 0
    # With in-order LDS the FB0 read is serviced before the later LB[s0,0] lands anyway.
    assert check_document(doc, model=ooo).safe


def test_out_of_order_vm_breaks_fourwave_partial_drains():
    doc = load("fourwave_fp8")
    v = check_document(doc, model=_with(default_counter_model(doc), vm=False))
    assert not v.safe and v.first.site.phase == "prologue"


def test_costs_change_what_a_wait_retires():
    """With 1 vm op per load, ping-pong's wait_vm(6) leaves the completion load in flight."""
    doc = load("pingpong_bf16")
    m = default_counter_model(doc)
    cheap = attrs.evolve(m, costs=tuple(attrs.evolve(c, ops=1) if c.counter == VM else c for c in m.costs))
    v = check_document(doc, model=cheap)
    assert not v.safe and v.first.kind.value == "LDS_RAW"


def test_a_new_target_with_other_wait_tags():
    """A plugin can rename the counters and their wait tags; the checker follows the model."""
    doc = load("fourwave_fp8")
    for e in doc["prologue"] + doc["kernel"] + doc["epilogue"]:
        if e["op"]["tag"] in (129, 130):
            e["op"]["tag"] += 100  # 229 / 230
    base = default_counter_model(load("fourwave_fp8"))
    model = attrs.evolve(base, name="other", counters=(CounterSpec("dma", 229), CounterSpec("smem", 230)),
                         costs=tuple(attrs.evolve(c, counter={"vm": "dma", "lgkm": "smem"}[c.counter])
                                     for c in base.costs))
    assert check_document(doc, model=model).safe
    assert not check_document(doc).safe  # the default model sees no waits at all


class _Host:
    """Stands in for the plugin host: answers pipeline_core_counter_model(target)."""

    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    def counter_model(self, target):
        self.asked.append(target)
        return self.answer


def _run(doc, host, *argv):
    import argparse

    from pipeline_core.check.cli import add_arguments, run
    p = argparse.ArgumentParser()
    add_arguments(p)
    p.add_argument("--target")
    return run(p.parse_args(list(argv)), doc, host=host)


def test_target_plugin_model_is_used(capsys):
    from pipeline_core.check import resolve_counter_model
    doc = load("pingpong_bf16")
    ooo = attrs.evolve(_with(default_counter_model(doc), lgkm=False), lds_in_order=False)
    host = _Host(attrs.evolve(ooo, name="my-gpu"))
    assert _run(doc, host) == 1  # target taken from the document's cli field
    assert host.asked == ["mi355x"] and "my-gpu" not in capsys.readouterr().err
    assert _run(doc, _Host(None), "--target", "x") == 0  # no answer: AMD default
    builder = _Host(lambda d: attrs.evolve(default_counter_model(d), name="built"))
    assert _run(doc, builder, "--format", "json") == 0
    assert '"name": "built"' in capsys.readouterr().out
    assert _run(doc, _Host("nonsense")) == 2
    assert "expected a CounterModel" in capsys.readouterr().err
    assert resolve_counter_model(doc) == default_counter_model(doc)


def test_document_target():
    from pipeline_core.check.counters import document_target
    assert document_target(load("default_matmul")) == "mi355x-single-buffer"
    assert document_target({"target": "t", "cli": ["--target", "u"]}) == "t"
    assert document_target({}) is None


def test_cost_on_an_undeclared_counter_is_refused():
    """A plugin's model whose costs name a counter it never declares fails when built, naming
    the counter, instead of a KeyError deep inside the checker."""
    m = default_counter_model(load("pingpong_bf16"))
    costs = tuple(attrs.evolve(c, counter="lds") if c.counter == LGKM else c for c in m.costs)
    with pytest.raises(ValueError, match=r"counts on 'lds', which is not one of its counters \(vm, lgkm\)"):
        attrs.evolve(m, costs=costs)


def test_check_cli_reports_a_model_with_an_undeclared_counter(capsys):
    doc = load("pingpong_bf16")

    def builder(d):
        m = default_counter_model(d)
        return attrs.evolve(m, costs=tuple(attrs.evolve(c, counter="lds") if c.counter == LGKM else c
                                           for c in m.costs))

    assert _run(doc, _Host(builder)) == 2
    err = capsys.readouterr().err
    assert "counts on 'lds'" in err and "Traceback" not in err

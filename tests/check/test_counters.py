"""Counter models: built from the target's sync model for a document, and plugged-in semantics."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.check import CounterModel, CounterSpec, OpCount, check_document, model_for_document
from pipeline_core_amd_mi355x.sync import LGKM, VM

from .helpers import TESTCFG, load


@pytest.mark.parametrize("case,vm,lgkm,notes", [
    ("pingpong_bf16", (2, 2), (8, 4), 0),  # lgkm from schedule_config (type parameters)
    ("fourwave_fp8", (2, 2), (4, 4), 0),  # lgkm from config (geometry)
    ("fourwave_fp8_bm64", (1, 1), (2, 2), 0),
    (TESTCFG, (4, 4), (1, 1), 2),  # both 0: 1 per fragment load assumed, and said so
])
def test_mi355x_model(case, vm, lgkm, notes):
    m = model_for_document(load(case))
    assert (m.cost(0, 0).ops, m.cost(0, 1).ops) == vm
    assert (m.cost(2, 0).ops, m.cost(2, 1).ops) == lgkm
    assert len(m.notes) == notes
    assert m.counter_for_wait(129).name == VM and m.counter_for_wait(130).name == LGKM
    assert m.counter_for_wait(128) is None and not m.barrier_drains and m.global_loads_write_lds
    assert m.lds_in_order  # the MI355X model assumes in-order LDS; a bare record does not
    assert not CounterModel(m.counters, m.costs).lds_in_order
    assert m.summary()["lds_in_order"] is True


def test_single_buffer_model():
    m = model_for_document(load("default_matmul"))
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
    ooo = _with(model_for_document(doc), lgkm=False)
    v = check_document(doc, model=attrs.evolve(ooo, lds_in_order=False))
    assert not v.safe and v.first.kind.value == "LDS_WAR"
    assert v.first.fix.value == 0
    # With in-order LDS the FB0 read is serviced before the later LB[s0,0] lands anyway.
    assert check_document(doc, model=ooo).safe


def test_out_of_order_vm_breaks_fourwave_partial_drains():
    doc = load("fourwave_fp8")
    v = check_document(doc, model=_with(model_for_document(doc), vm=False))
    assert not v.safe and v.first.site.phase == "prologue"


def test_costs_change_what_a_wait_retires():
    """With 1 vm op per load, ping-pong's wait_vm(6) leaves the completion load in flight."""
    doc = load("pingpong_bf16")
    m = model_for_document(doc)
    cheap = attrs.evolve(m, costs=tuple(attrs.evolve(c, ops=1) if c.counter == VM else c for c in m.costs))
    v = check_document(doc, model=cheap)
    assert not v.safe and v.first.kind.value == "LDS_RAW"


def test_a_new_target_with_other_wait_tags():
    """A plugin can rename the counters and their wait tags; the checker follows the model."""
    doc = load("fourwave_fp8")
    for e in doc["prologue"] + doc["kernel"] + doc["epilogue"]:
        if e["op"]["tag"] in (129, 130):
            e["op"]["tag"] += 100  # 229 / 230
    base = model_for_document(load("fourwave_fp8"))
    model = attrs.evolve(base, name="other", counters=(CounterSpec("dma", 229), CounterSpec("smem", 230)),
                         costs=tuple(attrs.evolve(c, counter={"vm": "dma", "lgkm": "smem"}[c.counter])
                                     for c in base.costs))
    assert check_document(doc, model=model).safe
    assert not check_document(doc).safe  # the document's target (mi355x) sees no waits at all


def _run(doc, host, *argv):
    import argparse

    from pipeline_core.check.cli import add_arguments, run
    p = argparse.ArgumentParser()
    add_arguments(p)
    p.add_argument("--target")
    return run(p.parse_args(list(argv)), doc, host=host)


def _gpu(name, sync):
    """A plugin registering target ``name`` with sync model ``sync`` (None: declares none)."""
    from pipeline_core import hookimpl
    from pipeline_core.config import TargetProfile
    from pipeline_core.schedule import TargetRecord
    from pipeline_core_amd_mi355x import mi355x_target

    class Gpu:
        @hookimpl
        def pipeline_core_register_targets(self):
            base = mi355x_target()
            return [TargetRecord(name, "test target", lambda: TargetProfile(
                base.cost_model, base.pipeline, sync=sync))]
    return Gpu()


def test_target_sync_model_is_used(capsys):
    from pipeline_core.testing import fresh_host
    from pipeline_core_amd_mi355x.sync import MI355X_SYNC

    doc = load("pingpong_bf16")
    ooo = attrs.evolve(MI355X_SYNC, name="my-gpu", shared_in_order=False, channels=tuple(
        attrs.evolve(c, in_order=c.name != LGKM) for c in MI355X_SYNC.channels))
    host = fresh_host(_gpu("my-gpu", ooo), autoload=True)
    assert _run(doc, host) == 0  # target taken from the document's cli field: mi355x
    assert _run(doc, host, "--target", "my-gpu", "--format", "json") == 1
    assert '"name": "my-gpu"' in capsys.readouterr().out


def test_target_without_sync_model_is_refused(capsys):
    from pipeline_core.testing import fresh_host

    doc = load("pingpong_bf16")
    host = fresh_host(_gpu("bare-gpu", None), autoload=True)
    assert _run(doc, host, "--target", "bare-gpu") == 2
    err = capsys.readouterr().err
    assert "target 'bare-gpu' declares no sync model" in err and "vmcnt" not in err
    doc["cli"] = []  # no target at all
    assert _run(doc, host) == 2
    assert "names no target" in capsys.readouterr().err


def test_document_target():
    from pipeline_core.check.counters import document_target
    assert document_target(load("default_matmul")) == "mi355x-single-buffer"
    assert document_target({"target": "t", "cli": ["--target", "u"]}) == "t"
    assert document_target({}) is None


def test_an_effect_on_an_undeclared_channel_is_refused():
    """A target whose sync model charges an op to a channel it never declares fails when the
    model is built, naming the channel, instead of a KeyError deep inside the checker."""
    import attrs as _attrs

    from pipeline_core_amd_mi355x.sync import MI355X_SYNC as model

    effects = tuple(_attrs.evolve(e, counter="lds") if e.counter == LGKM else e for e in model.effects)
    with pytest.raises(ValueError, match=r"'lds'.*declared channels: vm, lgkm"):
        _attrs.evolve(model, effects=effects)

"""flash-attention-bwd -p deterministic=true: dQ's reduces ordered across CTAs and proven so
(docs/guide/agents.md, "Turn-ordered adds"; docs/guide/attention.md, "Deterministic dQ"):
every variant compiles SAFE with each writer's reduce between its turn wait and its release
(after the full completion wait and the fence), and every edit that lets two adds land out of
order, or a turn go unreached, is refused by the proof."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.plan import Step, StepKind
from pipeline_core.proof import require_safe

from pipeline_core_schedules_attention.bwd_schedule import BackwardTag as T
from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips

NAME = "flash-attention-bwd"
VARIANTS = [dict(head_dim=d, causal=c, align=a) for d in (64, 128)
            for c, a in ((False, "top_left"), (True, "top_left"), (True, "bottom_right"))]
K = StepKind


def build(**params):
    """The deterministic backward; with two writers (``shared_dq=false``) unless ``params``
    say otherwise: two slots per KV block, the richer turn order (the shared variant's one
    writer takes slot 0 only: test_the_shared_variant_orders_its_one_writer)."""
    return compile_named(NAME, params={k: str(v).lower() for k, v in
                                       {"deterministic": True, "shared_dq": False,
                                        **params}.items()})


@pytest.fixture(scope="module")
def det():
    return build()


def kernel(c, name):
    return next(p for p in c.plan.programs if p.name == name).kernel


def proven(c, plan):
    return require_safe(attrs.evolve(c, plan=plan, proof=None), allow_unsafe=True)


def edited(c, agent, steps):
    """``c`` with ``agent``'s kernel steps replaced, proven again (hazards kept)."""
    return proven(c, attrs.evolve(c.plan, programs=[
        attrs.evolve(p, kernel=tuple(steps)) if p.name == agent else p
        for p in c.plan.programs]))


def hazards(c):
    return {v.kind for v in c.proof.verdict.violations}


def messages(c):
    return " | ".join(v.message for v in c.proof.verdict.violations)


@pytest.mark.parametrize("params", VARIANTS, ids=lambda p: "-".join(map(str, p.values())))
def test_every_deterministic_variant_compiles_safe_with_its_turns(params):
    c = build(**params)
    assert c.proof.safe, messages(c)
    turns = c.plan.turns
    assert turns is not None and turns.agents == ("dq_writer0", "dq_writer1")
    assert [c.body[op].tag for op in turns.ops] == [T.DQ_REDUCE, T.DQ_REDUCE]
    assert any("turn-ordered adds dq" in a for a in c.proof.verdict.model["assumptions"])


@pytest.mark.parametrize("params", VARIANTS, ids=lambda p: "-".join(map(str, p.values())))
def test_the_shared_variant_orders_its_one_writer(params):
    """The call's variant (one dQ buffer: the consumers' partials summed in shared memory, one
    writer): one slot per KV block, and its turn wait still refused when dropped."""
    c = build(shared_dq=True, **params)
    assert c.proof.safe, messages(c)
    assert c.plan.turns.agents == ("dq_writer0",)
    assert [c.body[op].tag for op in c.plan.turns.ops] == [T.DQ_REDUCE]
    steps = kernel(c, "dq_writer0")
    assert [s.kind for s in steps] == [
        K.NAMED_SYNC, K.TURN_WAIT, K.OP, K.COMMIT, K.COUNTER_WAIT, K.NAMED_ARRIVE,
        K.TURN_DRAIN, K.TURN_FENCE, K.TURN_RELEASE]
    assert steps[1].value == 0
    bad = edited(c, "dq_writer0", [s for s in steps if s.kind != K.TURN_WAIT])
    assert H.ADD_ORDER in hazards(bad)


def test_the_default_variant_has_no_turns():
    c = compile_named(NAME, params={})
    assert c.plan.turns is None
    assert not any(s.kind.value.startswith("turn_") for p in c.plan.programs for s in p.kernel)


def test_each_writer_waits_its_slot_adds_hands_back_then_drains_fences_releases(det):
    for slot, name in enumerate(("dq_writer0", "dq_writer1")):
        steps = kernel(det, name)
        assert [s.kind for s in steps] == [
            K.NAMED_SYNC, K.TURN_WAIT, K.OP, K.COMMIT, K.COUNTER_WAIT, K.NAMED_ARRIVE,
            K.TURN_DRAIN, K.TURN_FENCE, K.TURN_RELEASE]
        assert steps[1].value == slot and steps[1].channel == "dq"
        assert (steps[6].channel, steps[6].value) == ("bulk", 0)  # every group complete


def _without(steps, kind):
    return [s for s in steps if s.kind != kind]


@pytest.mark.parametrize("writer", ["dq_writer0", "dq_writer1"])
def test_a_dropped_turn_wait_is_refused(det, writer):
    c = edited(det, writer, _without(kernel(det, writer), K.TURN_WAIT))
    assert H.ADD_ORDER in hazards(c) and "waits for no turn" in messages(c)


def test_the_release_before_the_completion_wait_is_refused(det):
    steps = list(kernel(det, "dq_writer0"))
    release = steps.pop(-1)
    steps.insert(steps.index(next(s for s in steps if s.kind == K.TURN_DRAIN)), release)
    c = edited(det, "dq_writer0", steps)
    assert H.ADD_ORDER in hazards(c) and "completion" in messages(c)


def test_the_completion_wait_loosened_to_the_read_wait_is_refused(det):
    # the .read wait (COUNTER_WAIT on the bulk channel) stays: it frees the buffer only
    c = edited(det, "dq_writer1", _without(kernel(det, "dq_writer1"), K.TURN_DRAIN))
    assert H.ADD_ORDER in hazards(c) and "a read wait only frees its source" in messages(c)
    loose = [attrs.evolve(s, value=1) if s.kind == K.TURN_DRAIN else s
             for s in kernel(det, "dq_writer1")]
    assert H.ADD_ORDER in hazards(edited(det, "dq_writer1", loose))


def test_a_dropped_fence_is_refused(det):
    c = edited(det, "dq_writer0", _without(kernel(det, "dq_writer0"), K.TURN_FENCE))
    assert H.ADD_ORDER in hazards(c) and "async proxy" in messages(c)


def test_a_dropped_release_deadlocks(det):
    c = edited(det, "dq_writer1", _without(kernel(det, "dq_writer1"), K.TURN_RELEASE))
    assert H.DEADLOCK in hazards(c) and "waits for ever" in messages(c)


@pytest.mark.parametrize("slot, kind", [(0, H.ADD_ORDER), (2, H.DEADLOCK)])
def test_a_wrong_slot_is_refused(det, slot, kind):
    """Writer 1 given writer 0's slot (the two add in either order) or slot 2 (slot 1 is
    never taken: every later turn waits for ever)."""
    steps = [attrs.evolve(s, value=slot) if s.kind == K.TURN_WAIT else s
             for s in kernel(det, "dq_writer1")]
    assert kind in hazards(edited(det, "dq_writer1", steps))


@pytest.mark.parametrize("shift", [1, -1])
def test_a_turn_off_by_one_is_refused(det, shift):
    """Every add's turn one later (the first is never released) or one earlier."""
    c = proven(det, attrs.evolve(det.plan, turns=attrs.evolve(det.plan.turns, first=shift)))
    assert H.DEADLOCK in hazards(c) and "not 0.." in messages(c)


class _Halved(BackwardTrips):
    """A rule that ranks KV blocks 2j and 2j+1 alike: two CTAs take one turn."""

    def turn_rank(self, kv_block: int) -> int:
        return kv_block // 2


@pytest.mark.parametrize("causal, align", [(False, "top_left"), (True, "top_left"),
                                           (True, "bottom_right")])
def test_a_rank_off_the_trip_rules_visiting_order_is_refused(causal, align):
    c = build(causal=causal, align=align)
    rule = c.plan.trip_rule
    shifted = proven(c, attrs.evolve(c.plan, trip_rule=attrs.evolve(rule, turn_shift=1)))
    assert H.DEADLOCK in hazards(shifted)
    fields = {f.name: getattr(rule, f.name) for f in attrs.fields(BackwardTrips)}
    halved = proven(c, attrs.evolve(c.plan, trip_rule=_Halved(**fields)))
    assert H.ADD_ORDER in hazards(halved) and "two adds take one turn" in messages(halved)


def test_the_visiting_order_covers_the_causal_diagonal_start():
    """Bottom-right with more queries than keys: KV block 0 skips the first query blocks, which
    no block adds to; the ones it visits are ranked from block 0 on."""
    rule = BackwardTrips(causal=True, block_m=64, block_n=128, align="bottom_right")
    orders = dict(rule.turn_orders())
    assert "query block 0 of seq_q 197, seq_k 128 (bottom_right)" not in orders  # sees no key
    assert orders["query block 1 of seq_q 197, seq_k 128 (bottom_right)"] == (0,)
    assert orders["query block 0 of seq_q 64, seq_k 391 (bottom_right)"] == (0, 1, 2, 3)
    assert all(ranks == tuple(range(len(ranks))) for ranks in orders.values())


def test_a_rule_without_turn_orders_is_unproven(det):
    c = proven(det, attrs.evolve(det.plan, trip_rule=None))
    assert H.ADD_ORDER in hazards(c) and "names no turn order" in messages(c)


def test_a_turn_step_outside_plan_turns_is_refused(det):
    c = proven(det, attrs.evolve(det.plan, turns=None))
    assert H.UNPROVEN in hazards(c)
    extra = list(kernel(det, "producer")) + [Step(kind=K.TURN_FENCE, channel="dq", tag=186)]
    assert H.UNPROVEN in hazards(edited(det, "producer", extra))


def test_the_call_packs_zeroed_turn_counters_beside_dk_and_dv(monkeypatch):
    """attention_bwd_main(deterministic=True) on test_call_launch's stand-ins: the ordered
    kernel is built, and each call zeroes one int32 counter per (batch, query head, query
    block) on the current stream, packed between dQacc and dK (the default packs none)."""
    import importlib.util
    import sys
    from pathlib import Path

    from pipeline_core_schedules_attention import bwd_call

    spec = importlib.util.spec_from_file_location(
        "attention_call_launch_tests", Path(__file__).with_name("test_call_launch.py"))
    assert spec is not None and spec.loader is not None
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    torch = launch.fake_torch(type("S", (launch.State,), {}))
    zeroed = []

    def zeros(n, dtype, device):
        zeroed.append((n, dtype))
        return launch.Tensor((n,), dtype, device)
    torch.zeros, torch.int32, torch.contiguous_format = zeros, "torch.int32", "contiguous"
    torch.empty_like = lambda t, memory_format=None: launch.Tensor(t.shape, t.dtype, t.device)
    monkeypatch.setitem(sys.modules, "torch", torch)
    launches, built = [], []
    monkeypatch.setattr(bwd_call.CALL, "launcher", lambda *a: launches.append(a))
    monkeypatch.setattr(bwd_call.CALL.kernels, "_build", lambda key: built.append(key) or
                        bwd_call.BwdKernel(kernel=key, smem=1, threads=384, block_m=64,
                                           block_n=128))
    monkeypatch.setattr(bwd_call.CALL.kernels, "_built", {})
    for cache in (bwd_call.CALL.recipes, bwd_call.CALL.args):
        monkeypatch.setattr(cache, "_items", {})
    monkeypatch.setattr(bwd_call, "tensor_map", lambda ptr, *a, **kw: ("map", ptr))
    monkeypatch.setattr(bwd_call, "bhsd_map", lambda t, rows, dtype: ("map", t.data_ptr()))
    b, hq, hkv, sq, sk, d = 2, 4, 2, 100, 300, 128
    sqp = bwd_call.padded_rows(sq)
    T = launch.Tensor
    tensors = (T((b, hq, sq, d)), T((b, hkv, sk, d)), T((b, hkv, sk, d)), T((b, hq, sq, d)),
               T((b, hq, sqp), "torch.float32"), T((b, hq, sqp), "torch.float32"),
               T((b, hq, sqp, d), "torch.float32"))
    for det in (True, False):
        dk, dv = bwd_call.attention_bwd_main(*tensors, causal=True, scale=0.125,
                                             deterministic=det)
        args = [a if isinstance(a, tuple) else int(a) for a in launches[-1][5]]
        at = args.index(tensors[6].ptr)  # dQacc
        if det:
            assert zeroed == [(b * hq * 2, "torch.int32")]  # 100 rows: two query blocks of 64
            assert args[at + 2:at + 4] == [dk.ptr, dv.ptr] and args[at + 1] not in (dk.ptr, 0)
        else:
            assert args[at + 1:at + 3] == [dk.ptr, dv.ptr] and len(zeroed) == 1
    assert [key[4] for key in built] == [True, False]  # the ordered kernel, then the default


def test_a_turn_wait_of_another_k_tile_is_no_turn_wait(det):
    steps = [attrs.evolve(s, lag=1) if s.kind == K.TURN_WAIT else s
             for s in kernel(det, "dq_writer0")]
    assert H.ADD_ORDER in hazards(edited(det, "dq_writer0", steps))


@attrs.frozen(kw_only=True)
class _Reversed(BackwardTrips):
    """A launch order that runs a head's KV blocks last to first: each block's add would wait
    for turns only later-launched blocks release."""

    def position(self, kv_head: int, kv_block: int, kv_heads: int, kv_blocks: int) -> int:
        return super().position(kv_head, kv_blocks - 1 - kv_block, kv_heads, kv_blocks)


@pytest.mark.parametrize("causal", [False, True])
def test_a_launch_order_against_the_turns_deadlocks(causal):
    c = build(causal=causal)
    fields = {f.name: getattr(c.plan.trip_rule, f.name) for f in attrs.fields(BackwardTrips)}
    assert hazards(proven(c, c.plan)) == set()
    assert H.DEADLOCK in hazards(proven(c, attrs.evolve(c.plan, trip_rule=_Reversed(**fields))))


@pytest.mark.parametrize("params, grouped", [
    (dict(), True), (dict(causal=True), True), (dict(deterministic=True), False),
    (dict(deterministic=True, causal=True, align="bottom_right", head_dim=64), False)])
def test_the_launch_order_is_the_calls_but_where_the_turns_are_proven(params, grouped):
    """The default kernels take the call's order (hg, snake: a head's KV blocks back to back
    without the mask, balanced groups causal); the deterministic kernel's order is its rule's,
    heads innermost, the one the turns' proof reads: its C declarator inverts position()."""
    from pipeline_core_schedules_attention.emit_attention_bwd import tile_exprs

    c = compile_named(NAME, params={k: str(v).lower() for k, v in params.items()})
    rule = c.plan.trip_rule
    assert rule.grouped is grouped
    decl = tile_exprs(rule)[0]
    if grouped:  # the call's groups, at the positions tile_order.POSITION deals (the snake)
        assert "hg" in decl
        with pytest.raises(ValueError, match="the call's"):
            rule.position(0, 0, 1, 1)
        return
    heads, blocks = 3, 5
    for p in range(heads * blocks):
        env = {"tile": p, "NB": blocks, "BHK": heads}
        vals = {}
        for part in decl.removeprefix("const int ").rstrip(";").split(", "):
            name, expr = part.split(" = ")
            vals[name] = eval(expr.replace("/", "//"), {}, env)  # noqa: S307 - our own C
        assert rule.position(vals["bhk"], vals["nb"], heads, blocks) == p


@pytest.mark.parametrize("params", [dict(head_dim=128, dq_cut="columns"),
                                    dict(head_dim=64, dq_cut="rows", block_m=128)],
                         ids=["columns", "rows"])
def test_the_calls_joined_cuts_keep_their_adds_in_turn(params):
    """The deterministic kernels the call builds (dQ by columns at D 128, by rows at D 64: one
    writer, meeting the consumers in a join): safe with one turn slot per KV block, and a rule
    that ranks two KV blocks alike (two adds in one turn) or shifts the ranks is refused."""
    c = build(shared_dq=True, causal=True, **params)
    assert c.proof.safe and c.plan.turns is not None and c.plan.turns.slots == 1
    assert {o.scope for o in c.plan.orders} == {"join"}
    rule = c.plan.trip_rule
    fields = {f.name: getattr(rule, f.name) for f in attrs.fields(BackwardTrips)}
    halved = proven(c, attrs.evolve(c.plan, trip_rule=_Halved(**fields)))
    assert H.ADD_ORDER in hazards(halved)
    shifted = proven(c, attrs.evolve(c.plan, trip_rule=attrs.evolve(rule, turn_shift=1)))
    assert H.DEADLOCK in hazards(shifted)

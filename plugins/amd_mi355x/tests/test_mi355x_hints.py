"""AMD schedule-group-barrier hints: the arithmetic, the op fields, the transform hook."""
from __future__ import annotations

import pytest

from pipeline_core.config import PipelineConfig
from pipeline_core.errors import ConfigError
from pipeline_core.ops import Entry, FrameworkTag, OpRole, Phase, ResourceKind, barrier, op

from pipeline_core_amd_mi355x import plugin
from pipeline_core_amd_mi355x.hints import (DS_READ, DS_WRITE, MFMA, VMEM_READ, AMDScheduleHints,
                                            append_amd_hints, hint_ops, plan_hints)
from pipeline_core_amd_mi355x.configs import mi355x_double_buffer, mi355x_single_buffer

TEST_HINTS = AMDScheduleHints(4, 4, 2, 16, 16, 2, 2)


def frag(sub):
    return op(2, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0, subtile=sub)


def body_with_frags(t):
    return [frag(s) for s in range(t)]


def pattern(ops):
    return [(o.subtile, o.wait_value) for o in ops]


def test_t2_test_configuration_gives_48_hints():
    """docs/guide/reference-behaviours.md, "AMD hint tags": 16 + 16 + 16 = 48 hints; MFMA counts 2 per read and 0/0 per store."""
    ops = hint_ops(body_with_frags(2), mi355x_single_buffer(), TEST_HINTS)
    assert len(ops) == 48
    p = pattern(ops)
    assert p[:16] == [(DS_READ, 1), (MFMA, 2)] * 8
    assert p[16:32] == [(DS_WRITE, 1), (MFMA, 0), (VMEM_READ, 1), (MFMA, 0)] * 4
    assert p[32:] == [(DS_READ, 1), (MFMA, 2)] * 8


def test_t1_counts_two_per_store():
    """docs/guide/reference-behaviours.md, "AMD hint tags": T=1 gives MFMA counts 2/2 per store; 32 hints."""
    ops = hint_ops(body_with_frags(1), mi355x_single_buffer(), TEST_HINTS)
    p = pattern(ops)
    assert len(ops) == 32
    assert p[:16] == [(DS_WRITE, 1), (MFMA, 2), (VMEM_READ, 1), (MFMA, 2)] * 4
    assert p[16:] == [(DS_READ, 1), (MFMA, 2)] * 8


@pytest.mark.parametrize("t", [1, 2, 3, 4, 6])
def test_hint_count_formula(t):
    """In general the hint count is 4 * stores + 2 * (m + n) * T."""
    assert len(hint_ops(body_with_frags(t), mi355x_single_buffer(), TEST_HINTS)) == 4 * 4 + 2 * 8 * t


def test_32x32_issues_one_mfma_per_read_and_splits_the_rest_over_stores():
    h = AMDScheduleHints(4, 4, 2, 32, 32, 2, 2)
    plan = plan_hints(body_with_frags(2), mi355x_single_buffer(), h)
    assert (plan.mmas_per_read, plan.per_store, plan.extra) == (1, 4, 0)
    h3 = AMDScheduleHints(4, 4, 2, 32, 32, 2, 1)  # 3 stores: 16 MFMAs -> 6, 5, 5
    p = pattern(hint_ops(body_with_frags(2), mi355x_single_buffer(), h3))
    per_store = [p[16 + 4 * i: 20 + 4 * i] for i in range(3)]
    assert [(s[1][1], s[3][1]) for s in per_store] == [(3, 3), (2, 3), (2, 3)]


def test_zero_counts_are_emitted_and_no_stores_is_fine():
    h = AMDScheduleHints(2, 2, 1, 16, 16, 0, 0)
    ops = hint_ops(body_with_frags(4), mi355x_single_buffer(), h)
    # 4 mmas over 16 reads -> 0 per read, still emitted
    assert len(ops) == 2 * 4 * 4 and all(o.wait_value == 0 for o in ops if o.subtile == MFMA)


def test_hint_op_fields():
    """docs/guide/reference-behaviours.md, "AMD hint tags": tag 133, SCALAR, FENCE, mask in subtile, count in wait_value, defaults."""
    o = hint_ops(body_with_frags(2), mi355x_single_buffer(), TEST_HINTS)[1]
    assert o.tag == FrameworkTag.SCHED_GROUP_BARRIER
    assert (o.resource, o.role, o.subtile, o.wait_value) == (ResourceKind.SCALAR, OpRole.FENCE, MFMA, 2)
    assert (o.stage, o.channel, o.latency, o.vm_cost, o.lgkm_cost) == (0, -1, 0, 0, 0)


def test_append_numbers_entries_after_the_kernel():
    kernel = tuple(Entry(barrier(), i, Phase.KERNEL) for i in range(3))
    out = append_amd_hints(kernel, body_with_frags(1), mi355x_single_buffer(), TEST_HINTS)
    assert out[:3] == kernel
    assert [e.time_slot for e in out] == list(range(len(out)))
    assert all(e.phase == Phase.KERNEL and not e.is_prefetch for e in out[3:])


def test_body_without_frags_is_an_error_not_a_division_by_zero():
    with pytest.raises(ConfigError) as err:
        hint_ops([barrier()], mi355x_single_buffer(), TEST_HINTS)
    assert "fragment load" in str(err.value)


@pytest.mark.parametrize("kwargs,field", [
    (dict(mma_m=16, mma_n=32), "mma_n"), (dict(mma_m=8, mma_n=8), "mma_m"),
    (dict(m_mmas=0), "m_mmas"), (dict(k_mmas=-1), "k_mmas"), (dict(a_loads_per_thread=-1), "a_loads_per_thread"),
])
def test_hint_record_validation(kwargs, field):
    base = dict(m_mmas=4, n_mmas=4, k_mmas=2, mma_m=16, mma_n=16, a_loads_per_thread=2,
                b_loads_per_thread=2)
    with pytest.raises(ConfigError) as err:
        AMDScheduleHints(**{**base, **kwargs})
    assert err.value.field == field


class _Carrier:
    name = "carrier"
    amd_hints = TEST_HINTS


def test_transform_hook_applies_only_to_single_buffer_mi355x_with_hints():
    sb, db = mi355x_single_buffer(), mi355x_double_buffer()
    got = plugin.pipeline_core_kernel_transforms(_Carrier(), "mi355x-single-buffer", sb)
    assert [t.name for t in got] == ["amd-sched-group-hints"]
    kernel = got[0].function((), body_with_frags(2), sb)
    assert len(kernel) == 48
    assert plugin.pipeline_core_kernel_transforms(_Carrier(), "mi355x", db) is None
    assert plugin.pipeline_core_kernel_transforms(_Carrier(), "other-gpu", sb) is None
    assert plugin.pipeline_core_kernel_transforms(object(), "mi355x-single-buffer", sb) is None
    assert isinstance(sb, PipelineConfig)

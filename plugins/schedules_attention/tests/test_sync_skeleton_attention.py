"""What runs is what was proven (issue 33), for ``cuda-attention``: every flash-attention-fwd
kernel the suite emits synchronizes, per role and in program order, exactly as the plan the
checker proved (``pipeline_core_nvidia_h100.sync_skeleton``, the GEMM's check); the steps of an
output tile with no KV block are their own section (``once``)."""
from __future__ import annotations

import re

import pytest

from pipeline_core.api import compile_named
from pipeline_core.plugin_api import CompiledSchedule

from pipeline_core_nvidia_h100.sync_skeleton import (SkeletonMismatch, check_skeleton,
                                                     kernel_skeleton)

from pipeline_core_schedules_attention.call import HEAD_DIMS, call_params, call_stages
from pipeline_core_schedules_attention.emit_attention import emit_attention

NAME = "flash-attention-fwd"
NO_OVERLAP = {"intra_overlap": "false"}
#: label -> -p parameters, -T stages and -O options: every variant test_emit_attention emits
VARIANTS: dict[str, tuple[dict[str, str], int, dict[str, object]]] = {
    "default": ({}, 2, {}),
    "watchdog fp16": ({}, 2, {"watchdog": 1000, "dtype": "fp16"}),
    "causal": ({"causal": "true"}, 2, {}),
    "causal bottom-right": ({"causal": "true", "align": "bottom_right"}, 2, {}),
    "q_stages=2": ({"head_dim": "64", "q_stages": "2"}, 2, {}),
    "q_stages=2 block_n=64 s4": ({"head_dim": "64", "q_stages": "2", "block_n": "64"}, 4, {}),
    "q_stages=2 D=128": ({"head_dim": "128", "q_stages": "2"}, 2, {}),
    "3 consumers": ({"head_dim": "64", "q_stages": "2", "consumers": "3", "block_m": "192",
                     "consumer_registers": "160"}, 3, {}),
    **{f"pingpong={pp} D={d}": ({**NO_OVERLAP, "pingpong": str(pp).lower(),
                                 "head_dim": str(d)}, 2, {})
       for pp in (True, False) for d in (64, 128)},
    **{f"call D={d} causal={causal} short={short}": (call_params(d, causal, short=short),
                                                     call_stages(d, causal, short), {})
       for d in HEAD_DIMS for causal in (False, True) for short in (False, True)},
    "varlen": ({"varlen": "true"}, 2, {}),
    "varlen causal bottom-right q_stages=2": ({"varlen": "true", "causal": "true",
                                                "align": "bottom_right", "head_dim": "64",
                                                "q_stages": "2"}, 3, {}),
}


def _source(label: str) -> tuple[CompiledSchedule, str]:
    params, stages, options = VARIANTS[label]
    c = compile_named(NAME, params=params, target_args={"stages": str(stages)})
    return c, emit_attention(c, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_every_emitted_attention_kernel_synchronizes_as_its_proven_plan(label):
    c, src = _source(label)
    assert c.proof.safe
    check_skeleton(c, src, once=True, label=label)
    once = [w for w in kernel_skeleton(src, "consumers") if w.section == "once"]
    assert [str(w.sync) for w in once] == ["mbarrier.wait(q_full, once, 0)",
                                           "mbarrier.arrive(q_empty, once, warp)"]


def test_a_consumer_that_skips_the_once_wait_fails_naming_it():
    c, src = _source("default")
    lines = src.split("\n")
    zero = [i for i, x in enumerate(lines) if "pc:section once" in x][1]  # the consumers'
    broken = "\n".join(lines[:zero + 1] + lines[zero + 2:])
    with pytest.raises(SkeletonMismatch) as info:
        check_skeleton(c, broken, once=True)
    assert re.search(r"role consumer0, section once, position 0: expected plan step "
                     r"phase_wait\(channel=q_full, once=True\) -> "
                     r"mbarrier\.wait\(q_full, once, 0\) \[once\], found kernel line \d+: "
                     r"'if \(lane == 0\) mbar_arrive\(q_empty_bar\(\(o % 1\)\)\);'",
                     str(info.value)), str(info.value)


def test_a_dropped_wgmma_wait_fails_in_the_kernel_loop():
    c, src = _source("pingpong=False D=64")
    broken = src.replace("wgmma_wait<0>();", "", 2)  # the consumers' prologue's and loop's
    with pytest.raises(SkeletonMismatch, match=r"role consumer0, section prologue 0, "
                                               r"position \d+: expected plan step counter_wait"):
        check_skeleton(c, broken, once=True)

"""benchmarks/attention_checks.py without a GPU: the issue's four mutations are refused by
compile, reach the kernel text when forced with --allow-unsafe and the watchdog, and build with
nvcc (the GPU run then records what each does: docs/guide/attention.md, "GPU checks")."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from pipeline_core_nvidia_h100.toolchain import GENCODE, nvcc

from pipeline_core_schedules_attention.emit_attention import emit_attention

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "attention_checks.py"


@pytest.fixture(scope="module")
def checks():
    spec = importlib.util.spec_from_file_location("attention_checks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: per mutation: the proof's first hazard, and what the forced kernel shows against the control
EXPECTED = {
    "drop-v-release": ("DEADLOCK", lambda s: s.count("mbar_arrive(v_empty_bar")),
    "loosen-s-wait": ("SMEM_WAR", lambda s: (s.count("wgmma_wait<1>();"),
                                             s.count("wgmma_wait<2>();"))),
    "flip-k-parity": ("DEADLOCK", lambda s: s.count("mbar_wait_bounded(k_full_bar(")
                      - s.count("mbar_wait_bounded(k_full_bar(((rb + t) % 2)), (((rb + t) / 2 "
                                "+ (1)) & 1)")),
    "drop-named-arrive": ("DEADLOCK", lambda s: s.count("bar.arrive")),
}


@pytest.mark.parametrize("intra", [True, False])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_mutation_is_refused_and_reaches_the_watchdog_kernel(checks, name, intra, tmp_path):
    assert set(EXPECTED) == set(checks.MUTATIONS)
    kind, view = EXPECTED[name]
    m, (hazard, text) = checks.mutant(name, intra)
    assert hazard == kind and text.startswith("compile refused schedule flash-attention-fwd")
    assert not m.proof.safe
    control = emit_attention(checks.compiled_variant(64, intra, True), watchdog=checks.WATCHDOG)
    bad = emit_attention(m, watchdog=checks.WATCHDOG)
    assert view(bad) != view(control)  # the emitter writes the plan; it does not repair it
    assert "mbar_wait_bounded(" in bad and "mbar_wait(" not in bad.split("__global__")[1]
    if nvcc() is None:
        pytest.skip("needs nvcc")
    cu, cubin = tmp_path / "m.cu", tmp_path / "m.cubin"
    cu.write_text(bad)
    proc = subprocess.run([nvcc() or "nvcc", "-cubin", GENCODE, "-std=c++17", "-o", str(cubin),
                           str(cu)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the loosened S wait lets the softmax read S's accumulators with its wgmma in flight:
    # ptxas then serializes every wgmma (C7514), which is why it ran correct on the GPU
    assert ("C7514" in proc.stderr) == (name == "loosen-s-wait")


def test_the_checks_run_every_variant_at_every_alignment_and_each_mutant_beside_a_control(checks):
    labels = checks.kernels_labels()
    assert len(set(labels)) == len(labels)
    # the variants on each of the call's tiles: long and short where a short tile differs
    # (every head dim, causal or not, has one now; tiles() keeps the rule for one that has not)
    assert checks.tiles(64, False) == checks.tiles(64, "top_left") == (False, True)
    assert checks.tiles(128, "bottom_right") == checks.tiles(128, False) == (False, True)
    for io, pp in checks.VARIANTS:
        for d in (64, 128):
            for causal in checks.CAUSAL:
                for short in checks.tiles(d, causal):
                    assert checks.variant_label(d, io, pp, causal, short) in labels
    assert any(label.startswith("variant-64-short-") for label in labels)
    assert any(label.startswith("variant-128-short-") and label.endswith("-False")
               for label in labels)
    for d in (64, 128):
        for dtype in ("bf16", "fp16"):
            for causal in checks.CAUSAL:
                assert {f"call-{d}-{dtype}-{causal}-{checks.TILES[short]}"
                        for short in checks.tiles(d, causal)} <= set(labels)
    assert {label for label in labels if label.startswith("call-128-") and label.endswith(
        "-short")} == {f"call-128-{dtype}-{causal}-short" for dtype in ("bf16", "fp16")
                       for causal in checks.CAUSAL}
    for io in checks.MUTANT_VARIANTS:
        assert {checks.mutant_label(n, io) for n in ("control", *checks.MUTATIONS)} <= set(labels)
    # the sanitizers' shapes: a tail, causal, bottom-right grouped-query with no-key rows
    shapes = checks.SANITIZE_SHAPES
    assert any(sq % 128 and sk % 128 and not c for _, _, _, sq, sk, c in shapes)
    assert any(c == "top_left" for *_, c in shapes)
    assert any(c == "bottom_right" and hq != hkv and sq > sk for _, hq, hkv, sq, sk, c in shapes)


@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_a_short_variant_compiles_the_calls_short_tile_with_the_overlaps_asked(checks, causal):
    """compiled_variant(short=True) is the call's short-sequence tile (Q double-buffered, its
    ring depth as -T stages) with the overlaps given; the long one keeps one Q."""
    from pipeline_core_schedules_attention.call import call_stages

    short = checks.compiled_variant(64, False, True, causal, short=True)
    long = checks.compiled_variant(64, False, True, causal)
    assert short.proof.safe and long.proof.safe
    align = causal or "top_left"
    for c in (short, long):
        assert c.plan.trip_rule.causal is bool(causal) and c.plan.trip_rule.align == align
        g = c.launch.geometry
        assert (g.intra_overlap, g.pingpong) == (False, True)
    assert short.plan.ring("q_full").stages == 2 and long.plan.ring("q_full").stages == 1
    assert short.plan.ring("k_full").stages == call_stages(64, bool(causal), True) == 3
    assert long.plan.ring("k_full").stages == call_stages(64, bool(causal)) == 2


@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
def test_a_d128_short_variant_is_the_calls_short_tile(checks, causal):
    """At D=128 compiled_variant(short=True) is the call's short tile: causal, the long tile
    on a ring of 3 with one Q; not causal, KV blocks of 128 with Q double-buffered."""
    short = checks.compiled_variant(128, False, True, causal, short=True)
    long = checks.compiled_variant(128, False, True, causal)
    assert short.proof.safe and long.proof.safe
    assert long.plan.ring("q_full").stages == 1 and long.plan.ring("k_full").stages == 2
    sg, lg = short.launch.geometry, long.launch.geometry
    if causal:
        assert short.plan.ring("q_full").stages == 1 and short.plan.ring("k_full").stages == 3
        assert (sg.block_m, sg.block_n, sg.consumers) == (lg.block_m, lg.block_n, lg.consumers)
    else:
        assert short.plan.ring("q_full").stages == 2 and short.plan.ring("k_full").stages == 2
        assert (sg.block_n, lg.block_n) == (128, 176)
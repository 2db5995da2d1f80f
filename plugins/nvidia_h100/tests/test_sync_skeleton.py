"""What runs is what was proven (issue 33): every ``warpspecialized-gemm`` kernel the suite emits
carries, per role and in program order, exactly the synchronization of the plan the checker
proved (``sync_skeleton``); an emitter that drops, moves or rewrites one statement fails here."""
from __future__ import annotations

import re
import subprocess

import pytest

from pipeline_core.api import compile_named
from pipeline_core.plugin_api import CompiledSchedule

from pipeline_core_nvidia_h100 import skeleton
from pipeline_core_nvidia_h100.autotune import Candidate
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma
from pipeline_core_nvidia_h100.matmul_call import CALL_STAGES, schedule_params
from pipeline_core_nvidia_h100.sync_skeleton import (SkeletonMismatch, check_skeleton,
                                                     kernel_skeleton, skeleton_mismatches)
from pipeline_core_nvidia_h100.toolchain import nvcc
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant

PINGPONG = {"pingpong": "true", "BN": "128"}
CLUSTER = {"cluster": "2", "tails": "true"}
ONE = {"consumers": "1", "BM": "64", "consumer_registers": "240"}
#: label -> -p parameters, -T stages (None: the target's) and -O watchdog: every variant the
#: emitter tests of this plugin emit (test_emit_wgmma_sass, test_pingpong_gemm, test_tma_store,
#: test_split_k_proof, test_cluster_h100, test_scaled_batched_call, test_autotune,
#: test_grouped_mm)
VARIANTS: dict[str, tuple[dict[str, str], str | None, int | None]] = {
    "default": ({}, None, None),
    "default s3": ({}, "3", None),
    "watchdog": ({}, None, 1000),
    "s2 BN=128": ({"BN": "128"}, "2", None),
    "lag 2 s4": ({"release_lag": "2"}, "4", None),
    "1 consumer s3": (ONE, "3", None),
    "pingpong": (PINGPONG, "4", None),
    "pingpong s2": (PINGPONG, "2", None),
    "pingpong tails mn": ({**PINGPONG, "tails": "true", "b_major": "mn"}, "4", None),
    "store=tma": ({"store": "tma"}, "4", None),
    "store=tma 1 consumer": ({"store": "tma", "consumers": "1", "BM": "64"}, "4", None),
    "store=tma 3 consumers": ({"store": "tma", "consumers": "3", "BM": "192", "BN": "128",
                               "consumer_registers": "152"}, "3", None),
    "store=tma tails mn": ({"store": "tma", "tails": "true", "b_major": "mn"}, "4", None),
    "store=tma fp32 gelu": ({"store": "tma", "out_dtype": "fp32", "bias": "bf16",
                             "activation": "gelu", "tails": "true"}, "4", None),
    "split-K": ({"split_k": "true"}, None, None),
    "split-K tails": ({"split_k": "true", "tails": "true"}, None, None),
    "stream-K": ({"stream_k": "true"}, "4", None),
    "stream-K 1 consumer": ({"stream_k": "true", **ONE}, "3", None),
    "cluster": (CLUSTER, "4", None),
    "cluster watchdog": (CLUSTER, "4", 1000),
    "cluster 1 consumer": ({**CLUSTER, **ONE}, "4", None),
    "cluster mn fp16": ({**CLUSTER, "a_major": "mn", "b_major": "mn", "dtype": "fp16"}, "4",
                        None),
    "tails": ({"tails": "true"}, None, None),
    **{f"call {label}": (schedule_params(v), str(CALL_STAGES), None) for label, v in {
        "bf16 relu": GemmVariant(tails=True, activation="relu"),
        "e4m3 row-scaled bias bf16": GemmVariant(dtype="e4m3", tails=True, scale="row",
                                                 bias="bf16"),
        "e4m3 tensor-scaled fp32 split-K": GemmVariant(dtype="e4m3", tails=True,
                                                       scale="tensor", out_dtype="fp32",
                                                       split_k=True),
        "bf16 batched ab": GemmVariant(tails=True, b_major="mn", batch="ab"),
        "fp16 batched b": GemmVariant(dtype="fp16", tails=True, batch="b", out_dtype="fp32"),
        # grouped_mm's kernels (test_grouped_mm): the device tile scheduler over the groups
        "bf16 grouped": GemmVariant(tails=True, batch="grouped"),
        "e4m3 grouped_n row-scaled": GemmVariant(dtype="e4m3", tails=True, scale="row",
                                                 batch="grouped_n"),
        # their TMA store: per tile by TMA or directly (one staging buffer at 4 stages), and
        # along K through a 3-D map
        "bf16 grouped store=tma": GemmVariant(tails=True, batch="grouped", store="tma"),
        "bf16 grouped_k store=tma": GemmVariant(tails=True, batch="grouped_k", store="tma"),
        "bf16 cp.async": GemmVariant(tails=True, load="cp_async"),
        "bf16 cp.async split-K": GemmVariant(tails=True, load="cp_async", split_k=True),
        "bf16 stream-K gelu": GemmVariant(tails=True, stream_k=True, bias="bf16",
                                          activation="gelu"),
        "e4m3 stream-K row-scaled": GemmVariant(dtype="e4m3", tails=True, stream_k=True,
                                                scale="row"),
        "bf16 cp.async stream-K": GemmVariant(tails=True, load="cp_async", stream_k=True),
    }.items()},
    # an autotuned candidate's geometry (test_autotune)
    "call tuned 64x128 s3 1 consumer": (
        schedule_params(GemmVariant(tails=True, activation="relu"),
                        Candidate(bm=64, bn=128, stages=3, consumers=1)), "3", None),
}


def _compiled(label: str) -> CompiledSchedule:
    params, stages, _ = VARIANTS[label]
    return compile_named("warpspecialized-gemm", target="h100", params=params,
                         target_args={"stages": stages} if stages else None)


def _source(label: str) -> tuple[CompiledSchedule, str]:
    c = _compiled(label)
    return c, emit_wgmma(c, watchdog=VARIANTS[label][2])


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_every_emitted_kernel_synchronizes_as_its_proven_plan(label):
    c, src = _source(label)
    assert c.proof.safe
    check_skeleton(c, src, label=label)
    # the check read something of every role: each agent's ring waits and arrivals at least
    for p in c.plan.programs:
        role = ("relay" if p.name == "relay" else "producer" if p is c.plan.programs[0]
                else "consumers")
        index = [q.name for q in c.plan.programs if q.name.startswith("consumer")]
        words = kernel_skeleton(src, role, index.index(p.name) if role == "consumers" else 0)
        assert any(w.sync.what.startswith("mbarrier.") for w in words), (label, p.name)


def test_the_variants_cover_each_sync_family():
    """The variants reach every word of the skeleton's vocabulary the emitter writes."""
    seen = set()
    for label in VARIANTS:
        c, src = _source(label)
        for role, n in (("producer", 1), ("relay", 1), ("consumers", 3)):
            for i in range(n):
                seen |= {w.sync.what for w in kernel_skeleton(src, role, i)}
    assert seen == {"mbarrier.wait", "mbarrier.wait.cluster", "mbarrier.expect_tx",
                    "mbarrier.arrive", "mbarrier.arrive.peer", "mbarrier.arrive.async", "bar.sync", "bar.arrive",
                    "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "fence.proxy.async",
                    "fence.proxy.tensormap.acquire",
                    "fence.gpu", "bulk.wait_group.read", "bulk.wait_group", "bulk.commit_group",
                    "bulk.store", "counter.arrive", "counter.acquire", "counter.reset", "op"}


# --- three broken emitters: each fails the check, naming role, position, step and statement ---

def _mismatch(c: CompiledSchedule, src: str) -> str:
    with pytest.raises(SkeletonMismatch) as info:
        check_skeleton(c, src, label="broken")
    return str(info.value)


def test_a_dropped_wgmma_fence_fails_naming_the_step_and_what_came_instead():
    c, src = _source("default")
    lines = src.split("\n")
    kernel = next(i for i, x in enumerate(lines) if "// consumer kernel" in x)
    fence = next(i for i in range(kernel, len(lines)) if "wgmma_fence();" in lines[i])
    broken = "\n".join(lines[:fence] + lines[fence + 1:])
    msg = _mismatch(c, broken)
    # consumer0 and consumer1 run the one program: both lose the fence at position 1 of the loop
    for role in ("consumer0", "consumer1"):
        assert re.search(rf"role {role}, section kernel, position 1: expected plan step "
                         r"fence\(channel=wgmma\) -> wgmma\.fence \[kernel\], found kernel line "
                         rf"{fence + 1}: 'wgmma_tile\(\(\(rb \+ t\) % STAGES\)\);' -> op "
                         r"\[kernel\]", msg), msg
    assert "role producer" not in msg


def test_a_wrong_bar_sync_thread_count_fails(monkeypatch):
    """The emitter's named-barrier writer is broken to count one warp group short."""
    real = skeleton.named_step_line

    def short(s, aligned=True):
        line = real(s, aligned)
        return line.replace(f", {s.value};", f", {s.value - 128};") if line else line

    monkeypatch.setattr(skeleton, "named_step_line", short)
    c, src = _source("pingpong")
    assert "bar.sync 1, 128;" in src
    msg = _mismatch(c, src)
    assert re.search(r"role consumer0, section prologue 0, position 0: expected plan step "
                     r"named_sync\(channel=\w+, value=256, barrier=1, once=True, "
                     r"output_lag=1\) -> bar\.sync\(1, 256, 1\) \[prologue 0\], found kernel "
                     r"line \d+: 'if \(tile >= .*bar\.sync 1, 128;.*' -> bar\.sync\(1, 128, 1\)",
                     msg), msg


def test_a_wait_moved_after_its_use_fails():
    """The consumer's wait on the full stage goes after the wgmma group that reads the stage."""
    c, src = _source("lag 2 s4")
    lines = src.split("\n")
    kernel = next(i for i, x in enumerate(lines) if "// consumer kernel" in x)
    wait = next(i for i in range(kernel, len(lines)) if "mbar_wait(full_bar" in lines[i])
    use = next(i for i in range(wait, len(lines)) if "wgmma_tile(" in lines[i])
    moved = lines[:wait] + lines[wait + 1:use + 1] + [lines[wait]] + lines[use + 1:]
    msg = _mismatch(c, "\n".join(moved))
    assert re.search(r"role consumer0, section kernel, position 0: expected plan step "
                     r"phase_wait\(channel=full\) -> mbarrier\.wait\(full, 0, 0\) \[kernel\], "
                     r"found kernel line \d+: 'wgmma_fence\(\);' -> wgmma\.fence", msg), msg


def test_a_mismatch_past_the_end_names_the_missing_and_the_extra_statement():
    c, src = _source("store=tma")
    drained = src.replace("if (wtid == 0) pcgc::bulk_wait<0>();", "")
    assert re.search(r"section drain, position 0: expected plan step "
                     r"store_drain\(channel=store\) -> bulk\.wait_group\(0\) \[drain\], "
                     r"found no kernel statement",
                     _mismatch(c, drained))
    # a statement written twice on one line is two words: the second is one the plan lacks
    extra = src.replace("wgmma_commit();", "wgmma_commit(); wgmma_commit();", 1)
    (bad,) = [m for m in skeleton_mismatches(c, extra) if m.role == "consumer0"]
    assert bad.found is not None and bad.found.sync.what == "wgmma.commit_group"
    assert bad.expected is not None and bad.expected.sync.what != "wgmma.commit_group"


# --- the PTX agrees: what ptxas receives has the skeleton's named barriers and group waits ----

_PTX_NAMED = re.compile(r"\b(bar\.sync|bar\.arrive) (\d+|%r\d+), (\d+);")


@pytest.mark.needs_nvcc
@pytest.mark.parametrize("label", ["pingpong", "split-K", "store=tma"])
def test_the_ptx_has_the_named_barriers_and_group_waits_of_the_skeleton(label, tmp_path):
    """The source's skeleton against the PTX nvcc makes of it: the named barriers (id, thread
    count) of the PTX are the skeleton's, none more (a barrier whose id is a register, the TMA
    store's per-consumer one, by its count), and every ``wgmma.wait_group`` N of the skeleton
    is there."""
    c, src = _source(label)
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    ptx = tmp_path / "k.ptx"
    proc = subprocess.run([str(nvcc()), "-arch=sm_90a", "-std=c++17", "--ptx", str(cu), "-o",
                           str(ptx)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = ptx.read_text()
    words = [w.sync for role, i in (("producer", 0), ("consumers", 0), ("consumers", 1))
             for w in kernel_skeleton(src, role, i)]
    named = {(w.what, str(w.args[0]), str(w.args[1])) for w in words
             if w.what in ("bar.sync", "bar.arrive")}
    in_ptx = {(what, bar, n) for what, bar, n in _PTX_NAMED.findall(text)}
    assert {x for x in in_ptx if not x[1].startswith("%")} <= named
    assert {(w, n) for w, _, n in in_ptx} == {(w, n) for w, _, n in named}
    for w in words:
        if w.what == "wgmma.wait_group":
            assert f"wgmma.wait_group.sync.aligned {w.args[0]};" in text, w


def test_an_arrive_by_every_thread_instead_of_each_warp_fails():
    """The ring's arrival count was proven with one arrival per consumer warp: an arrive that
    lost its lane guard (32 per warp) is another skeleton."""
    c, src = _source("default")
    broken = src.replace("if (lane == 0) mbar_arrive(empty_bar(", "mbar_arrive(empty_bar(", 1)
    assert re.search(r"role consumer0, section \w+.*: expected plan step arrive\(channel=empty.*"
                     r"-> mbarrier\.arrive\(empty, \d, warp\).*-> mbarrier\.arrive\(empty, \d, "
                     r"thread\)", _mismatch(c, broken))


def test_a_synchronization_outside_the_programs_sections_fails():
    """A statement the family's code adds around the program (here after the output tile) is
    no step of the plan's."""
    c, src = _source("default")
    tile_end = "}  // next output tile"
    broken = src.replace(tile_end, "wgmma_wait<0>();\n        " + tile_end)
    assert re.search(r"role consumer0, section outside every section, position 0: expected no "
                     r"plan step, found kernel line \d+: 'wgmma_wait<0>\(\);' -> "
                     r"wgmma\.wait_group\(0\) \[outside every section\]", _mismatch(c, broken))

"""2-CTA clusters with TMA multicast (docs/guide/matmul.md, "Clusters"; docs/guide/agents.md,
"Clusters"): ``warpspecialized-gemm -p cluster=2`` pairs CTAs on adjacent M tiles that multicast
halves of the shared B tile; the proof instantiates both CTAs' programs and is SAFE (1 and 2
consumers, tails), each edit of the cluster's hand-off is refused, the emitter writes the
multicast copy, the cluster-scope peer arrival and the cluster barriers (nvcc sm_90a: no spills,
UTMALDG.2D.MULTICAST, the cluster barrier in SASS), and the call pairs CTAs where it can."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.check.verdict import HazardKind  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import TensorInfo, Tuning, plan_call  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402

H100_SMS = 132
CATEGORIES = ("drop_arrive", "cta_scope_remote_arrive", "cta_scope_peer_wait",
              "cluster_arrival_count",
              "drop_cluster_start", "drop_cluster_end")
#: label -> -p parameters of a cluster kernel
VARIANTS = {"2c": {}, "1c": {"consumers": "1", "BM": "64", "consumer_registers": "240"},
            "mn-fp16": {"a_major": "mn", "b_major": "mn", "dtype": "fp16"}}


def _compile(**params: str):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={"cluster": "2", "tails": "true", **params},
                         target_args={"stages": "4"})


def t(shape, strides=None, dtype="bf16"):
    strides = strides or (shape[1], 1)
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=4096,
                      device="cuda:0")


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_cluster_is_proven_over_both_ctas(label):
    c = _compile(**VARIANTS[label])
    v = c.proof.verdict
    assert v.safe, [x.message for x in v.violations]
    assert "producer@cta1" in v.model["agents"]
    assert any("cluster of 2 CTAs" in a for a in v.model["assumptions"])
    empty = next(r for r in c.plan.rings if r.kind == "empty")
    consumers = [p for p in c.plan.programs if p.name.startswith("consumer")]
    # the local consumer warps' releases and the peer's relay's one
    assert (empty.ctas, empty.arrivals) == (2, 4 * len(consumers) + 1)
    for p in consumers:  # the consumers arrive in their own CTA only (empty, then relay)
        assert [(s.channel, s.peer) for s in p.kernel if s.kind == StepKind.ARRIVE] == [
            ("empty", 0), ("relay", 0)]
    relay = c.plan.program("relay")
    assert [(s.peer, s.scope) for s in relay.kernel if s.kind == StepKind.ARRIVE] == [
        (1, "cluster")]


def test_every_edit_of_the_clusters_hand_off_is_refused():
    c = _compile()
    found: dict[str, set] = {}
    for m in agent_mutations(c.plan, CATEGORIES):
        if m.category == "drop_arrive" and "peer" not in m.description:
            continue
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)
        verdict = mutate_compiled(c, m, allow_unsafe=True).proof.verdict
        found.setdefault(m.category, set()).update(v.kind for v in verdict.violations)
    assert set(found) == set(CATEGORIES)
    assert HazardKind.DEADLOCK in found["drop_arrive"]            # the peer's release dropped
    assert HazardKind.SMEM_WAR in found["cta_scope_remote_arrive"]
    assert HazardKind.SMEM_WAR in found["cta_scope_peer_wait"]  # NVIDIA/cutlass#3324
    assert HazardKind.SMEM_WAR in found["cluster_arrival_count"]
    assert HazardKind.PHASE_OVERRUN in found["drop_cluster_start"]
    assert HazardKind.SMEM_WAR in found["drop_cluster_end"]


def test_cluster_and_split_k_together_are_refused_in_one_line():
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "cluster=2", "-p", "split_k=true"])
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "-p cluster" in line and "split_k" in line and "\n" not in line


@pytest.mark.parametrize("other", [["-p", "store=tma"], ["-p", "pingpong=true", "-p", "BN=128"],
                                   ["-p", "batch=a"], ["-p", "dtype=e4m3", "-p", "BK=128"]])
def test_a_cluster_with_a_variant_it_is_not_combined_with_is_refused_in_one_line(other):
    """The cluster kernel is built and proven with the direct store, no split, batch or fp8:
    the other combinations are refused by name, not emitted untried."""
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "cluster=2", *other])
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "-p cluster: 2 and -p " in line and "don't combine yet" in line and "\n" not in line


def test_the_emitter_writes_multicast_peer_arrivals_and_cluster_barriers():
    c = _compile()
    src = emit_wgmma(c)
    assert '__launch_bounds__(384, 1) __cluster_dims__(2, 1, 1)\n' in src
    # B's load: this CTA's share, multicast (pcgc::Operand's CLUSTER, gemm_wgmma_h100.cuh)
    assert "using LoadB = pcgc::Operand<B_MN, BN, BK, CHUNK_BYTES, false, false, 2>;" in src
    assert ("LoadB::load(stage_b(((rb + t) % STAGES)), &tmB, full_bar(((rb + t) % STAGES)), t, "
            "KT, tile_n * BN, crank);") in src
    # the producer acquires its empty stage at cluster scope: the peer's relay completes it
    assert ("mbar_wait_cluster(empty_bar(((rb + t) % STAGES)), (((rb + t) / STAGES + (-1)) & 1));"
            in src)
    # the relay (warp 1 of the producer warp group) forwards the consumers' releases to the peer
    relay = src[src.index("if (wtid == 32) {"):src.index("// ---- agents consumer0..")]
    assert "mbar_wait(relay_bar(((rb + t) % STAGES)), (((rb + t) / STAGES + (0)) & 1));" in relay
    assert "mbar_arrive_peer(empty_bar(((rb + t) % STAGES)), (crank + 1) % CLUSTER);" in relay
    assert src.count("if (lane == 0) mbar_arrive(relay_bar(((rb + t - 1) % STAGES)));") >= 1
    assert src.count("mbar_arrive_peer(") == 1 + 1  # the relay's, and the helper's definition
    # every role walks the same pairs: the pair index from blockIdx.x / CLUSTER, M tile by rank
    assert src.count("for (int tile = blockIdx.x / CLUSTER; tile < TILES; "
                     "tile += gridDim.x / CLUSTER, rb += KT) {") == 3
    assert src.count("tile_m = tile_m * CLUSTER + (int)crank;") == 3
    assert src.count("cluster_sync();  // the cluster's") == 2
    assert "__syncthreads();" not in src.split("extern \"C\"")[1]
    # the mutated plan (start barrier dropped, CTA-scope peer arrival) is emitted as mutated
    m = next(agent_mutations(c.plan, ("cta_scope_remote_arrive",)))
    bad = emit_wgmma(mutate_compiled(c, m, allow_unsafe=True))
    assert "mbar_arrive_peer_cta(" in bad
    m = next(agent_mutations(c.plan, ("drop_cluster_start",)))
    bad = emit_wgmma(mutate_compiled(c, m, allow_unsafe=True))
    assert bad.count("cluster_sync();") == 1
    # cluster=1 carries none of it
    plain = emit_wgmma(compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                                     params={"tails": "true"}, target_args={"stages": "4"}))
    kernel = plain.split('extern "C"')[1]  # the headers are every general kernel's
    for word in ("__cluster_dims__", "crank", "multicast", "cluster_sync", "mbar_arrive_peer"):
        assert word not in kernel
    assert "CHUNK_BYTES, false, false, 1>;  // the operands' TMA loads" in kernel


def test_the_call_pairs_ctas_where_the_tile_grid_allows():
    a, b = t((8192, 4096)), t((4096, 8192), (1, 4096))
    plan = plan_call(a, b, sms=H100_SMS, tuning=Tuning(cluster=2))
    assert plan.variant.cluster == 2 and plan.grid == 132 and plan.grid % 2 == 0
    assert plan.b.major == "k" and plan.b.box_outer == 128  # each CTA's half of BN=256
    # an odd M tile count: the last pair's second CTA runs past M (clipped), grid still even
    odd = plan_call(t((3 * 128 + 5, 512)), t((512, 300), (1, 512)), sms=H100_SMS,
                    tuning=Tuning(cluster=2))
    assert odd.variant.cluster == 2 and odd.grid == 2 * 2 * 2  # 2 pairs x 2 N tiles
    # one M tile: nothing to pair; a split: split-K's CTAs reduce through global memory
    assert plan_call(t((100, 512)), t((512, 304)), sms=H100_SMS,
                     tuning=Tuning(cluster=2)).variant.cluster == 1
    split = plan_call(t((256, 4096)), t((4096, 256), (1, 4096)), sms=H100_SMS,
                      tuning=Tuning(cluster=2))
    assert split.splits > 1 and split.variant.cluster == 1
    # the call's default today
    assert plan_call(a, b, sms=H100_SMS).variant.cluster == Tuning().cluster
    # a clustered call stores directly (the cluster is not combined with the TMA store yet)
    assert plan.variant.store == "direct" and plan.c is None


@pytest.mark.needs_nvcc
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_cluster_kernel_builds_without_spills_and_multicasts_in_sass(label, tmp_path):
    proc, cubin = compile_cubin(emit_wgmma(_compile(**VARIANTS[label])), tmp_path, "cl")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    boxes = 4 if VARIANTS[label].get("a_major") == "mn" else 1
    assert len(re.findall(r"\bUTMALDG\.2D\.MULTICAST\b", sass)) >= 1   # B's half, to both CTAs
    assert len(re.findall(r"\bUTMALDG\.2D\b(?!\.MULTICAST)", sass)) >= 1  # A, this CTA's own
    assert boxes >= 1
    assert len(re.findall(r"\bUCGABAR_ARV\b", sass)) == 2 and \
        len(re.findall(r"\bUCGABAR_WAIT\b", sass)) == 2  # the start and end cluster barriers
    assert re.search(r"\bSYNCS\.ARRIVE\.TRANS64\.RED\b", sass)  # the peer arrival (mapa'd)
    assert not re.search(r"\b(LDL|STL)\b", sass)

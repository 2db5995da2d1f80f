"""The ping-pong schedule on target h100-pingpong: compiled, proven, refused with bar.sync, emitted."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.ops import FrameworkTag  # noqa: E402

from pipeline_core_nvidia_h100.emit_pingpong import Geometry, geometry_from_options  # noqa: E402
from pipeline_core_nvidia_h100.pingpong import WARPS_PER_GROUP, PingPongTag  # noqa: E402
from pipeline_core_nvidia_h100.sync import (BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED,  # noqa: E402
                                            WAIT_CP_ASYNC)

PHASES = ("prologue", "kernel", "epilogue")
PP = ["pingpong", "--target", "h100-pingpong"]


@pytest.fixture(scope="module")
def doc():
    from pipeline_core.testing import run_cli
    res = run_cli(["compile", *PP, "--format", "json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _tags(doc, phase):
    return [e["op"]["tag"] for e in doc[phase]]


def test_compiles_to_the_double_buffer_with_two_staggered_groups_of_four_warps(doc):
    cfg = doc["config"]
    assert (cfg["depth"], cfg["num_partitions"], cfg["m_mmas"], cfg["n_mmas"]) == (2, 2, 2, 2)
    assert (cfg["vm_per_load_a"], cfg["vm_per_load_b"]) == (1, 1)
    assert doc["warp_stagger_index"] == 4
    assert doc["execution"]["warps_per_group"] == WARPS_PER_GROUP == 4
    assert len(doc["kernel"]) == 62 and len(doc["prologue"]) == 10


def test_barriers_are_non_aligned_and_fragment_waits_vanish(doc):
    tags = [t for ph in PHASES for t in _tags(doc, ph)]
    assert BARRIER_SYNC_NONALIGNED in tags
    assert BAR_SYNC_ALIGNED not in tags  # tag 128: neither bar.sync nor the template's BARRIER
    assert int(FrameworkTag.WAIT_LGKM) not in tags and int(FrameworkTag.WAIT_VM) not in tags


def test_waits_count_one_group_per_load_op(doc):
    # block 3 of each half waits until only the 3 loads issued after the completion load remain
    kernel = [e["op"]["wait_value"] for e in doc["kernel"] if e["op"]["tag"] == WAIT_CP_ASYNC]
    assert kernel == [3, 3]
    loads = [e for e in doc["kernel"] if e["op"]["tag"] in (PingPongTag.LOAD_A, PingPongTag.LOAD_B)]
    assert len(loads) == 8
    waits = [e["op"]["wait_value"] for ph in ("prologue", "epilogue") for e in doc[ph]
             if e["op"]["tag"] == WAIT_CP_ASYNC]
    assert waits and set(waits) == {0}


def test_check_proves_it_safe_under_eight_warps(pipeline_cli):
    res = pipeline_cli(["check", *PP])
    assert res.exit_code == 0, res.stderr
    assert "SAFE (2 warp groups x 4 warps" in res.stdout


@pytest.mark.parametrize("command", ["compile", "check", "emit"])
def test_the_aligned_bar_sync_is_refused_under_the_stagger(pipeline_cli, command):
    res = pipeline_cli([command, *PP, "-T", "barrier=bar.sync"])
    assert res.exit_code != 0
    assert "bar.sync is an aligned barrier" in res.stderr
    assert "staggers 2 warp groups" in res.stderr and "non-aligned barrier kind" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_aligned_document_is_refused_by_check_input(pipeline_cli, doc, tmp_path):
    bad = json.loads(json.dumps(doc))
    for ph in PHASES:
        for e in bad[ph]:
            if e["op"]["tag"] == BARRIER_SYNC_NONALIGNED:
                e["op"]["tag"] = BAR_SYNC_ALIGNED
    path = tmp_path / "aligned.json"
    path.write_text(json.dumps(bad))
    res = pipeline_cli(["check", "--input", str(path)])
    assert res.exit_code == 2
    assert "prologue[5]: bar.sync is an aligned barrier" in res.stderr


def test_the_multistage_h100_target_still_refuses_pingpong_by_name(pipeline_cli):
    res = pipeline_cli(["compile", "pingpong", "--target", "h100"])
    assert res.exit_code == 2
    # pingpong also fits the ping-pong family now (issue 39), which h100 is not of
    assert ("made for targets mi355x, h100-pingpong and target family ping-pong, not h100 "
            "(family copy-ring)") in res.stderr


def test_emitted_source_follows_the_stagger_shell(pipeline_cli, doc):
    res = pipeline_cli(["emit", *PP])
    assert res.exit_code == 0, res.stderr
    src = res.stdout
    assert src.count("cp_async_commit();") == sum(
        e["op"]["tag"] in (PingPongTag.LOAD_A, PingPongTag.LOAD_B) for ph in PHASES for e in doc[ph])
    assert src.count("barrier_sync<0>();") == sum(
        e["op"]["tag"] == BARRIER_SYNC_NONALIGNED for ph in PHASES for e in doc[ph]) + 3
    assert "bar_sync_aligned<0>();" not in src.split("// ---- the compiled entries")[1]
    head, rest = src.split("if (wg == 1) barrier_sync<0>();")
    assert head.count("cp_async_commit();") == doc["warp_stagger_index"]
    assert "if (wg == 0) barrier_sync<0>();" in rest.split("for (int k_base = 2 * BK")[1]
    assert "load_a(1, 1, k_base - 1 * BK); cp_async_commit();" in src  # the K_PREV completion load


@pytest.mark.parametrize("options, message", [
    ({"BM": 256, "BN": 256}, "-O BM: tile 256x256x64 needs 448"),
    ({"BK": 48}, "-O BK: must be 32 or 64"),
    ({"BN": 96}, "-O BN: must be a positive multiple of 128"),
    ({"BM": 96}, "-O BM: must be a positive multiple of 64"),
    ({"BM": 64, "BK": 32}, "-O BM: a subtile of 32 rows"),
])
def test_bad_tiles_are_refused_naming_the_option(options, message):
    from pipeline_core.errors import ProgramError
    with pytest.raises(ProgramError, match=message.replace("(", r"\(")):
        geometry_from_options(options)


@pytest.mark.parametrize("option, message", [
    ("BQ=1", "Unknown -O parameter of emitter cuda-pingpong 'BQ'. Known parameters of emitter "
             "cuda-pingpong: BK, BM, BN."),
    ("BM=x", "-O BM=x is invalid for emitter cuda-pingpong: 'x' is not an integer"),
    ("BM=\uff11\uff12\uff18", "is not an integer (use the ASCII digits 0-9)"),
    ("BM=4096", "-O BM=4096 is invalid for emitter cuda-pingpong: an integer in [64, 512]"),
    ("BK=48", "-O BK=48 is invalid for emitter cuda-pingpong: one of 32, 64"),
    ("BN=96", "-O BN=96 is invalid for emitter cuda-pingpong: an integer in [128, 512]"),
    ("BN=192", "emitter cuda-pingpong: -O BN: must be a positive multiple of 128"),
])
def test_the_core_checks_the_declared_options_before_the_emitter_runs(pipeline_cli, option,
                                                                      message):
    """``-O`` values are parsed by the record's declared options (type, bound, choices) in the
    core, exit 2 in one line; the emitter's own geometry check still names the option."""
    res = pipeline_cli(["emit", "pingpong", "--target", "h100-pingpong", "-O", option])
    assert res.exit_code == 2, res.stderr
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert res.stdout == ""


def test_geometry_of_the_default_tile():
    g = geometry_from_options({})
    assert (g.bm, g.bn, g.bk, g.threads) == (128, 128, 64, 256)
    assert g.mma_per_entry == 16 and g.smem_bytes == 65536 and g.data_registers == 160
    with pytest.raises(ValueError, match="K=192: .* multiple of 128"):
        g.check_shape(256, 256, 192)
    Geometry(bm=128, bn=128, bk=32).validate()


@pytest.mark.parametrize("extra", [(), ("-c", "minimal_barriers=true", "--allow-unsafe")])
def test_the_targets_own_sync_tags_have_their_names_in_the_document(extra):
    """Issue 33: the document named the wait_group and the non-aligned barrier ``OP150`` and
    ``OP152``: the compile's names lacked the sync model's."""
    from pipeline_core.testing import run_cli

    res = run_cli(["compile", *PP, *extra, "--format", "json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    named = {e["op"]["tag"]: e["op"]["tag_name"] for p in PHASES for e in doc[p]}
    assert named[WAIT_CP_ASYNC] == "WAIT_CP_ASYNC"
    assert not [n for n in named.values() if n.startswith("OP")]
    if extra:  # the stagger's non-aligned barrier shows with minimal barriers
        assert named[BARRIER_SYNC_NONALIGNED] == "BARRIER_SYNC"

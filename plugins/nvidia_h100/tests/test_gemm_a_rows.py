"""A's TMA box clipped to M (``-p a_rows``; gemm_call.a_box_rows; docs/guide/matmul.md,
"Decomposition"): where all of M is one tile shorter than BM, the producer copies only M's rows
(rounded up to 8) and the stage's barrier expects only their bytes.

What users would notice if it broke: a kernel that waits for bytes no copy brings (a hang), or
counts a stage full before A's rows land (wrong sums); a small-M product planned with a box the
kernel was not built for; a layout the clip cannot serve taking it anyway."""
from __future__ import annotations

import re

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.autotune import Candidate  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (TensorInfo, TileShape, Tuning,  # noqa: E402
                                                 plan_call)
from pipeline_core_nvidia_h100.warpspecialized import DTYPE_BYTES  # noqa: E402


def t(shape, strides=None, dtype="bf16"):
    if strides is None:
        strides = (shape[1], 1) if len(shape) == 2 else (1,)
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=4096)


@pytest.mark.parametrize("m, bm, rows", [
    (1, 64, 8), (7, 64, 8), (16, 64, 16), (57, 64, 0), (63, 64, 0), (64, 64, 0),
    (100, 128, 104), (128, 128, 0), (200, 128, 0),
])
def test_one_short_tile_of_m_clips_a_box_to_m_rounded_to_8(m, bm, rows):
    """57 rounds to 64 = BM: no clip; two tiles of M (200 rows at 128) never clip."""
    p = plan_call(t((m, 512)), t((512, 1024)), tile=TileShape(bm=bm, bn=128), sms=132)
    assert p.variant.a_rows == rows
    assert p.a.box_outer == (rows or bm)


def test_layouts_the_clip_cannot_serve_keep_the_whole_box():
    mn = plan_call(t((16, 512), (1, 16)), t((512, 1024)), tile=TileShape(bm=64, bn=128))
    assert mn.a.major == "mn" and mn.variant.a_rows == 0
    batched = plan_call(t((4, 16, 512), (16 * 512 + 64, 512, 1)),
                        t((4, 512, 1024), (512 * 1024, 1024, 1)), tile=TileShape(bm=64, bn=128))
    assert batched.variant.batch != "none" and batched.variant.a_rows == 0
    off = plan_call(t((16, 512)), t((512, 1024)), tile=TileShape(bm=64, bn=128),
                    tuning=Tuning(clip_a=False))
    assert off.variant.a_rows == 0 and off.a.box_outer == 64


@pytest.mark.parametrize("m", [1, 9, 16, 40, 64, 100, 128, 130])
@pytest.mark.parametrize("dtype, tile", [("bf16", (64, 128)), ("bf16", (128, 256)),
                                         ("fp16", (64, 64)), ("e4m3", (128, 256))])
def test_the_host_box_and_the_kernels_expected_bytes_agree(m, dtype, tile):
    """The bytes the A map's box moves are the bytes the compiled kernel's stage expects for A
    (its AgentSpec.op_bytes, from the same -p a_rows), for every M around the clip."""
    bm, bn = tile
    k = 1024
    if dtype == "e4m3":
        from pipeline_core_nvidia_h100.gemm_scaled import plan_scaled
        one = t((), ())
        p = plan_scaled(t((m, k), dtype="e4m3"), t((k, 512), (1, k), dtype="e4m3"),
                        attrs.evolve(one, dtype="fp32"), attrs.evolve(one, dtype="fp32"),
                        tile=TileShape(bm=bm, bn=bn), sms=132)
    else:
        p = plan_call(t((m, k), dtype=dtype), t((k, 512), dtype=dtype),
                      tile=TileShape(bm=bm, bn=bn), sms=132)
    c = Candidate(bm=bm, bn=bn, stages=4, consumers=1 if bm == 64 else 2)
    g = c.geometry(p.variant)
    assert p.a.major == "k"
    assert p.a.box_outer * p.a.box_inner * DTYPE_BYTES[dtype] == g.a_copy_bytes
    assert g.a_bytes == bm * p.a.box_inner * DTYPE_BYTES[dtype]  # the stage keeps BM rows


def _compile(params, stages=8):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={"BM": "64", "BN": "128", "consumers": "1", "tails": "true",
                                 **params}, target_args={"stages": str(stages)})


def test_the_clipped_kernel_is_proven_and_expects_the_boxs_bytes():
    full, clipped = _compile({}), _compile({"a_rows": "16"})
    tx = [re.findall(r"mbar_expect_tx\(full_bar.*?, (\d+)u\);", emit_wgmma(c))
          for c in (full, clipped)]
    assert tx == [[str((64 + 128) * 64 * 2)], [str((16 + 128) * 64 * 2)]]
    # the proof ran on the clipped plan's bytes (compile proves what it emits)
    assert clipped.plan.op_bytes[0] == 16 * 64 * 2 and full.plan.op_bytes[0] == 64 * 64 * 2


@pytest.mark.parametrize("params, says", [
    ({"a_rows": "12"}, "-p a_rows: 12: a multiple of 8 below -p BM=64"),
    ({"a_rows": "64"}, "-p a_rows: 64: a multiple of 8 below -p BM=64"),
    ({"a_rows": "16", "a_major": "mn"}, "not with -p a_major=mn"),
    ({"a_rows": "16", "load": "cp_async"}, "not with -p load=cp_async"),
    ({"a_rows": "16", "batch": "a"}, "not with -p batch=a"),
])
def test_a_box_the_kernel_cannot_take_is_one_line(params, says):
    args = ["compile", "warpspecialized-gemm", "-p", "BM=64", "-p", "BN=128", "-p",
            "consumers=1"]
    for key, value in params.items():
        args += ["-p", f"{key}={value}"]
    res = run_cli(args)
    assert res.exit_code == 2, res.stdout
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr

"""Tile shape -> KernelGeometry / launch defaults
(docs/guide/reference-behaviours.md, "Geometry factors")."""
from __future__ import annotations

import pytest

from pipeline_core.errors import ConfigError

from pipeline_core_amd_mi355x.geometry import (TileShape, derive_safe_max_globals,
                                               four_wave_launch_defaults,
                                               pingpong_launch_defaults)


def summary(ld):
    return (ld.vm_per_load_a, ld.vm_per_load_b, ld.lgkm_per_load_a, ld.lgkm_per_load_b, ld.max_globals)


@pytest.mark.parametrize("shape,expected", [
    (TileShape("bf16", 256, 256, 64, 16, 16, 32), (2, 2, 8, 4, 1)),
    (TileShape("fp8", 256, 256, 128, 16, 16, 128), (2, 2, 8, 4, 0)),
    (TileShape("fp8", 128, 256, 128, 16, 16, 128), (1, 2, 4, 4, 0)),
])
def test_pingpong_examples(shape, expected):
    assert summary(pingpong_launch_defaults(shape)) == expected


@pytest.mark.parametrize("shape,expected", [
    (TileShape("fp8", 128, 128, 128, 16, 16, 128), (2, 2, 4, 4, 0)),
    (TileShape("fp8", 64, 64, 128, 16, 16, 128), (1, 1, 2, 2, 0)),
    (TileShape("fp8", 128, 256, 128, 16, 16, 128), (2, 4, 4, 8, 0)),
    (TileShape("bf16", 128, 128, 64, 16, 16, 32), (2, 2, 4, 4, 1)),
])
def test_four_wave_examples(shape, expected):
    assert summary(four_wave_launch_defaults(shape)) == expected


def test_pingpong_bf16_matches_golden_params(golden):
    p = golden("pingpong_bf16")["params"]
    ld = pingpong_launch_defaults(TileShape("bf16", p["BM"], p["BN"], p["BK"], p["MMA_M"], p["MMA_N"],
                                            p["MMA_K"]))
    got = ld.as_params()
    for key in ("WM", "WN", "num_m_mmas", "num_n_mmas", "num_k_mmas", "quadrant_m_mmas",
                "quadrant_n_mmas", "vm_per_load_a", "vm_per_load_b", "lgkm_per_load_a",
                "lgkm_per_load_b", "max_globals", "elem_bytes", "is_fp8"):
        assert got[key] == p[key], key


@pytest.mark.parametrize("case", ["fourwave_fp8", "fourwave_fp8_bm64"])
def test_four_wave_matches_golden_params(golden, case):
    p = golden(case)["params"]
    g = p["geometry"]
    ld = four_wave_launch_defaults(TileShape("fp8" if g["is_fp8"] else "bf16", g["BM"], g["BN"], g["BK"],
                                             g["MMA_M"], g["MMA_N"], g["MMA_K"]))
    geo = ld.geometry
    for key, value in g.items():
        assert getattr(geo, key) == value, key
    assert (ld.num_m_mmas, ld.num_n_mmas, ld.num_k_mmas, ld.quadrant_m, ld.quadrant_n, ld.max_globals) == (
        p["num_m_mmas"], p["num_n_mmas"], p["num_k_mmas"], p["quadrant_m_mmas"], p["quadrant_n_mmas"],
        p["max_globals"])


@pytest.mark.parametrize("shape,field", [
    (TileShape("int8", 128, 128, 128, 16, 16, 128), "dtype"),
    (TileShape("fp8", 0, 128, 128, 16, 16, 128), "BM"),
    (TileShape("fp8", 96, 128, 128, 16, 16, 128), "BM"),
    (TileShape("fp8", 128, 32, 128, 16, 16, 128), "BN"),
    (TileShape("fp8", 128, 128, 192, 16, 16, 128), "BK"),
    (TileShape("bf16", 64, 128, 32, 16, 16, 32), "BM"),  # vm would floor to 0
    (TileShape("fp8", 128, 128, 128, 16, 16, 2), "MMA_K"),  # 16 x 2 < 64 lanes
    (TileShape("fp8", 128, 128, 8, 16, 16, 8), "BK"),  # half a 16-byte load per row
])
def test_uneven_or_unknown_shapes_name_the_parameter(shape, field):
    with pytest.raises(ConfigError) as err:
        four_wave_launch_defaults(shape)
    assert err.value.field == field
    assert field in str(err.value)


# --- derive_safe_max_globals (A54-A56, B12-B14; moved here from the core with the rule) ---

@pytest.mark.parametrize("name,num_k_mmas,expect", [
    ("a54_b12_bf16", 2, 1), ("a55_b13_fp8", 1, 0), ("a56_b14_large_k", 4, 1)])
def test_a54_a56_b12_b14_derive_safe_max_globals(name, num_k_mmas, expect):
    assert derive_safe_max_globals(num_k_mmas) == expect

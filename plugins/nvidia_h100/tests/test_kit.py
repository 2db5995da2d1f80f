"""The Hopper kit (issue 34): one home for what every warp-specialized family shares, held by
reading the families' sources (the kit's door itself: tests/test_plugin_api_surface.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plan import Ring, Step, StepKind  # noqa: E402

from pipeline_core_nvidia_h100.kit.frame import (AgentCode, AgentsFamily,  # noqa: E402
                                                 agents_kernel_body)
from pipeline_core_nvidia_h100.kit.rings import RingState  # noqa: E402
from pipeline_core_nvidia_h100.kit.tiles import (DeviceTileLoop, TileLoop,  # noqa: E402
                                                 grouped_tile_loop)
from pipeline_core_nvidia_h100.kit.wgmma import wgmma_rs, wgmma_ss  # noqa: E402

PLUGINS = Path(__file__).resolve().parents[2]


def _sources() -> dict[str, str]:
    """Every plugin module's source (tests aside), by its path under plugins/."""
    return {p.relative_to(PLUGINS).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(PLUGINS.glob("*/pipeline_core_*/**/*.py"))}


def _writers(needle: str) -> list[str]:
    return [name for name, text in _sources().items() if needle in text]


def test_the_sources_are_read():
    names = _sources()
    assert "nvidia_h100/pipeline_core_nvidia_h100/emit_wgmma.py" in names
    assert "schedules_attention/pipeline_core_schedules_attention/emit_attention.py" in names


@pytest.mark.parametrize("needle", ["mbar_init(", "mbar_init_fence", "setmaxnreg_",
                                    'role_mark("producer")', 'role_mark("consumers")',
                                    "__syncthreads();"])
def test_one_module_writes_the_kernel_frame(needle):
    """The mbarriers' initialisation, the start barrier, the role split and ``setmaxnreg`` are
    written by ``kit/frame.py`` alone: the GEMM's frame (``skeleton.agents_kernel_body``) and
    attention's (about 55 lines of ``emit_attention.py``) were two (issue 34)."""
    assert _writers(needle) == ["nvidia_h100/pipeline_core_nvidia_h100/kit/frame.py"]


def test_one_module_writes_the_wgmma_wrappers():
    """The SS / RS wgmma wrappers' text has one home (``kit/wgmma.py``): the GEMM emitter and
    attention each wrote the SS one."""
    assert _writers("wgmma.mma_async.sync.aligned") == [
        "nvidia_h100/pipeline_core_nvidia_h100/kit/wgmma.py"]


def test_one_module_writes_a_steps_ring_position_and_parity():
    """The ring position / stage / parity formula has one home (``kit/rings.py``): the GEMM and
    attention emitters each wrote their own, and the two disagreed on a ring's depth."""
    assert _writers("(rb + t") == ["nvidia_h100/pipeline_core_nvidia_h100/kit/rings.py"]
    for name in ("nvidia_h100/pipeline_core_nvidia_h100/emit_wgmma.py",
                 "schedules_attention/pipeline_core_schedules_attention/emit_attention.py"):
        source = _sources()[name]
        assert "/ STAGES +" not in source and "RingState.of(" in source, name
    once = Step(kind=StepKind.PHASE_WAIT, channel="q_full", once=True)
    lagged = Step(kind=StepKind.PHASE_WAIT, channel="full", lag=1, phase_offset=-1)
    assert RingState.of(once, 2).stage == "(o % 2)"
    assert RingState.of(lagged, "STAGES").parity(-1) == "(((rb + t - 1) / STAGES + (-1)) & 1)"


def _family(once_stages: str = "") -> AgentsFamily:
    return AgentsFamily(constants="<constants>", ring_bytes="<ring bytes>", stage_views="<views>",
                        consumer_state="<state>", compute="<compute>", finish="<finish>",
                        once_stages=once_stages)


def _body(rings, tiles=None, family=None, **kw) -> list[str]:
    return agents_kernel_body(
        rings=rings, producer=AgentCode(lines=("load();",), once=("load_once();",)),
        consumers=[AgentCode(lines=("mma();",), once=("release_once();",))],
        producer_name="loader", producer_registers=40, consumer_registers=232,
        family=family or _family(), tiles=tiles or grouped_tile_loop(), emitter="probe",
        **kw).split("\n")


def test_the_frame_lays_out_and_initialises_every_ring_of_the_plan():
    """One mbarrier per ring and stage, in the plan's ring order: three rings (two writer rings
    waited on separately and the release ring) get three offsets and one initialisation loop
    with each ring's own arrival count; each role's program sits inside its own persistent tile
    loop, the family's code around it."""
    rings = [Ring(name="k_full", kind="full", stages=2, arrivals=1),
             Ring(name="v_full", kind="full", stages=2, arrivals=1),
             Ring(name="empty", kind="empty", stages=2, arrivals=8)]
    body = _body(rings)
    assert "    const u32 bars = ring + <ring bytes>;  // k_full[0..STAGES), then " \
           "v_full[0..STAGES), then empty[0..STAGES)" in body
    assert [line.strip() for line in body if "_bar = [&]" in line] == [
        "auto k_full_bar = [&](int s) { return bars + 8u * s; };",
        "auto v_full_bar = [&](int s) { return bars + 8u * (STAGES + s); };",
        "auto empty_bar = [&](int s) { return bars + 8u * (2 * STAGES + s); };"]
    assert [line.strip() for line in body if "mbar_init(" in line or "for (int s" in line] == [
        "for (int s = 0; s < STAGES; ++s) {", "mbar_init(k_full_bar(s), 1);",
        "mbar_init(v_full_bar(s), 1);", "mbar_init(empty_bar(s), 8);"]
    assert body.index("                load();") > body.index(
        "            for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, rb += KT) {")
    assert body.index("<compute>") < body.index("        mma();") < body.index("<finish>")
    assert "        // ---- agent loader (its compiled program, one line per step) ----" in body
    assert "load_once();" not in "\n".join(body)  # no empty tiles: no once-only branch


def test_once_rings_have_their_own_depth_and_empty_tiles_run_the_once_steps_alone():
    """Attention's shape: a Q ring loaded once per output tile (its depth the family's
    ``Q_STAGES``) before the K ring (``STAGES``): each offset sums the earlier rings' depths,
    each depth initialises in its own loop, and a tile loop with empty tiles (``KT == 0``)
    guards every program with its once steps alone; the family's tile loop head and per-tile
    lines (``o``, the tile order, the tile's bounds) sit where the frame puts the GEMM's."""
    rings = [Ring(name="q_full", kind="full", stages=1, arrivals=1, once=True),
             Ring(name="q_empty", kind="empty", stages=1, arrivals=8, once=True),
             Ring(name="k_full", kind="full", stages=2, arrivals=1),
             Ring(name="k_empty", kind="empty", stages=2, arrivals=8)]
    loop = ("int rb = 0, o = 0;", "for (int tile = blockIdx.x; tile < TILES; "
            "tile += gridDim.x, rb += KT, ++o) {")
    tiles = DeviceTileLoop(counts=("const int TILES = T, KT = K;",),
                           producer=TileLoop(head=loop, tile=("<order>",)),
                           consumers=TileLoop(head=loop, tile=("<order>", "<bounds>")),
                           empty_tiles=True)
    body = _body(rings, tiles, _family("Q_STAGES"))
    assert [line.strip() for line in body if "_bar = [&]" in line] == [
        "auto q_full_bar = [&](int s) { return bars + 8u * s; };",
        "auto q_empty_bar = [&](int s) { return bars + 8u * (Q_STAGES + s); };",
        "auto k_full_bar = [&](int s) { return bars + 8u * (2 * Q_STAGES + s); };",
        "auto k_empty_bar = [&](int s) { return bars + 8u * (2 * Q_STAGES + STAGES + s); };"]
    assert [line.strip() for line in body if "mbar_init(" in line or "for (int s" in line] == [
        "for (int s = 0; s < Q_STAGES; ++s) {", "mbar_init(q_full_bar(s), 1);",
        "mbar_init(q_empty_bar(s), 8);", "for (int s = 0; s < STAGES; ++s) {",
        "mbar_init(k_full_bar(s), 1);", "mbar_init(k_empty_bar(s), 8);"]
    assert "    const int TILES = T, KT = K;" in body
    text = "\n".join(body)
    assert text.count("if (KT == 0) {  // an output tile with no K tile: the once steps "
                      "alone") == 2
    producer = text.split("// pc:role consumers")[0]
    assert producer.index("<order>") < producer.index("load_once();") < producer.index(
        "} else {") < producer.index("load();")
    assert "            <bounds>" in body and "        mma();" not in body  # nested: one deeper
    assert "                release_once();" in body and "                mma();" in body


def test_a_once_ring_without_the_familys_depth_is_refused():
    ring = Ring(name="q_full", kind="full", stages=1, arrivals=1, once=True)
    with pytest.raises(ProgramError, match=r"^emitter probe: the plan's ring q_full is loaded "
                                           r"once per output tile, and the kernel family names "
                                           r"no depth for such rings"):
        _body([ring])


def test_the_wgmma_wrappers_bind_the_fragment_and_the_flags():
    """SS: N / 2 accumulators, both descriptors, the transpose flags (none for fp8), D += A.B
    or (``scale_d``) a run-time flag; RS: A in four registers, B MN-major."""
    ss = wgmma_ss(64, "fp16", 1, 0)
    assert "void wgmma_m64n64k16(float (&d)[32], pcwg::u64 da, pcwg::u64 db) {" in ss
    assert "m64n64k16.f32.f16.f16" in ss and "p, 1, 1, 1, 0;" in ss and '"r"(1));' in ss
    assert "p, 1, 1;" in wgmma_ss(128, "e4m3") and "m64n128k32" in wgmma_ss(128, "e4m3")
    scaled = wgmma_ss(128, "bf16", scale_d=True)
    assert "pcwg::u64 db, int scale_d) {" in scaled and '"r"(scale_d));' in scaled
    rs = wgmma_rs(64, "bf16")
    assert "void wgmma_rs_m64n64k16(float (&d)[32], pcwg::u32 a0" in rs
    assert "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;" in rs
    with pytest.raises(ValueError, match=r"^wgmma_rs: dtype 'e4m3' has no MN-major B operand"):
        wgmma_rs(64, "e4m3")


def test_the_consumer_index_is_shuffled_where_the_family_asks_or_a_tile_split_needs_it():
    """kit/frame.py's uniform_consumer: the attention emitters read the consumer index through a
    warp shuffle (ptxas then keeps the descriptors derived from it in uniform registers); a
    family that does not ask (the GEMM's, where it measured no faster) keeps the plain index."""
    rings = [Ring(name="full", kind="full", stages=2, arrivals=1),
             Ring(name="empty", kind="empty", stages=2, arrivals=8)]
    shuffled = "const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);"
    plain = "[[maybe_unused]] const int consumer = wg - 1;"
    assert any(shuffled in line for line in _body(rings, uniform_consumer=True))
    body = _body(rings)
    assert any(plain in line for line in body) and not any(shuffled in line for line in body)


def test_producer_warps_run_a_one_thread_producer_on_each_warps_first_lane_or_are_refused():
    """``producer_warps`` N: the producer's program on lane 0 of warps 0..N-1 (decoding's
    several issuers); with a whole-warp-group producer, or past 4 warps, one line refuses it
    instead of silently keeping one guard or the other."""
    rings = [Ring(name="full", kind="full", stages=2, arrivals=1),
             Ring(name="empty", kind="empty", stages=2, arrivals=4)]
    body = "\n".join(_body(rings, producer_warps=4))
    assert "if (lane == 0 && wtid < 128) {" in body and "if (wtid == 0) {" not in body
    assert "if (wtid == 0) {" in "\n".join(_body(rings))
    for kw in ({"producer_warps": 2, "producer_threads": 128}, {"producer_warps": 5}):
        with pytest.raises(ProgramError) as info:
            _body(rings, **kw)
        assert "producer_warps=" in str(info.value) and "\n" not in str(info.value)

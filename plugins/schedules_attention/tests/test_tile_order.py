"""The persistent grid's causal tile order (tile_order.py; docs/guide/attention.md): the
kernel's C (the position of a CTA's round, the declarators of a position's tile) and the
host's Python agree on every tile, the order runs every (head, query block) once, heaviest
first within a group, the snake mirrors exactly the odd rounds (a partial last one too), and
the host's choice of order balances the CTAs' work as a simulation of the grid says."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from pipeline_core_nvidia_h100.toolchain import nvcc

from pipeline_core_schedules_attention import tile_order
from pipeline_core_schedules_attention.tile_order import (GROUPS, POSITION, TileOrder, busiest,
                                                          choose, order_exprs, position,
                                                          tile_at)
from pipeline_core_schedules_attention.tiles import LoopBounds

ORDERS = [TileOrder(hg=g, snake=s) for g in GROUPS for s in (False, True)]

#: (heads, query blocks, grid): grid dividing the tiles or not, a grid of one, a grid of every
#: tile, heads fewer than a group, heads not a multiple of the group, a partial last round
SHAPES = [(1, 1, 1), (3, 5, 4), (3, 5, 15), (13, 7, 10), (8, 4, 32), (6, 4, 1), (20, 9, 7),
          (64, 32, 132), (30, 3, 11), (17, 16, 132), (256, 8, 132)]


def _c_to_python(decl: str) -> tuple[str, str]:
    """(name, Python expression) of one C declarator ``name = expr`` over non-negative ints:
    ``/`` as ``//``, ``&&`` as ``and``, ``cond ? a : b`` as ``(a) if (cond) else (b)``,
    ``(int)gridDim.x`` as ``grid``."""
    name, expr = decl.split(" = ", 1)
    expr = expr.replace("(int)gridDim.x", "grid").replace("/", "//").replace("&&", " and ")
    assert "gridDim" not in expr and expr.count("?") <= 1
    if " ? " in expr:
        cond, rest = expr.split(" ? ", 1)
        then, other = rest.rsplit(" : ", 1)
        expr = f"({then}) if ({cond}) else ({other})"
    return name, expr


def c_order(causal: bool):
    """The kernel's order (order_exprs, evaluated as C would): position -> (head, query
    block)."""
    code = [(name, compile(expr, name, "eval"))
            for name, expr in map(_c_to_python, order_exprs(causal))]
    assert [name for name, _ in code] == ["bh", "tile_m"]

    def at(tile: int, *, bh: int, mt: int, order: TileOrder) -> tuple[int, int]:
        env = {"tile": tile, "MT": mt, "BH": bh, "TILES": bh * mt, "hg": order.hg, "min": min}
        for name, expr in code:
            env[name] = eval(expr, env)  # noqa: S307 - our own expression
        return env["bh"], env["tile_m"]
    return at


def c_position():
    """The kernel's POSITION (its return expression, evaluated as C would): (round k, CTA,
    grid, snake) -> position."""
    (ret,) = [x.strip() for x in POSITION if x.strip().startswith("return ")]
    expr = (ret.removeprefix("return ").rstrip(";").replace("(int)blockIdx.x", "cta")
            .replace("(int)gridDim.x", "grid").replace("&&", " and "))
    # its one conditional, the parenthesized tail "((cond) ? a : b)"
    head, cond, then, other = re.fullmatch(r"(.*)\(\((.+)\) \? (.+) : (.+)\)", expr).groups()
    code = compile(f"{head}(({then}) if ({cond}) else ({other}))", "position", "eval")
    return lambda k, cta, grid, snake: eval(code, {"k": k, "cta": cta, "grid": grid,  # noqa: S307
                                                   "snake": int(snake)})


def kernel_tiles(bh: int, mt: int, grid: int, order: TileOrder, causal: bool = True):
    """Each CTA's (head, query block) in its order, as the kernel's loop runs them: round k's
    position while it lies among the tiles."""
    at, pos = c_order(causal), c_position()
    out = []
    for cta in range(grid):
        k, mine = 0, []
        while (p := pos(k, cta, grid, order.snake)) < bh * mt:
            mine.append(at(p, bh=bh, mt=mt, order=order))
            k += 1
        out.append(mine)
    return out


@pytest.mark.parametrize("bh,mt,grid", SHAPES)
def test_the_kernels_order_and_tile_at_agree_and_run_every_tile_once(bh, mt, grid):
    """Every order the host may pick: the C and Python give the same position of every round
    of every CTA and the same (head, query block) of every position, and the CTAs run every
    tile once."""
    every = sorted((h, m) for h in range(bh) for m in range(mt))
    pos = c_position()
    for k in range(-(-bh * mt // grid) + 1):
        for cta in range(grid):
            for snake in (False, True):
                assert pos(k, cta, grid, snake) == position(k * grid + cta, grid=grid,
                                                            snake=snake)
    for causal in (True, False):
        at = c_order(causal)
        for order in ORDERS:
            kernel = [at(p, bh=bh, mt=mt, order=order) for p in range(bh * mt)]
            host = [tile_at(p, causal=causal, bh=bh, mt=mt, order=order)
                    for p in range(bh * mt)]
            assert kernel == host, (causal, order)
            assert sorted(kernel) == every, (causal, order)
            ran = kernel_tiles(bh, mt, grid, order, causal)
            assert sorted(t for cta in ran for t in cta) == every, (causal, order)
            if not causal:  # head-major, whatever order the call packs
                assert kernel == every


@pytest.mark.parametrize("bh,mt,grid", SHAPES)
def test_causal_groups_run_their_query_blocks_heaviest_first(bh, mt, grid):
    """The heads go in groups of hg (the last one short), a group's tiles back to back, its
    heads side by side, its query blocks from the last to the first."""
    at = c_order(True)
    for hg in GROUPS:
        seen = [at(p, bh=bh, mt=mt, order=TileOrder(hg=hg)) for p in range(bh * mt)]
        for start in range(0, bh, hg):
            heads = range(start, min(bh, start + hg))
            run = seen[start * mt:heads.stop * mt]
            assert {h for h, _ in run} == set(heads), (hg, start)
            blocks = [m for _, m in run]
            assert blocks == sorted(blocks, reverse=True), (hg, start)
            # side by side: each query block of the group is one tile per head in a row
            assert run == [(h, m) for m in reversed(range(mt)) for h in heads]


@pytest.mark.parametrize("bh,mt,grid", SHAPES)
def test_the_snake_mirrors_exactly_the_odd_rounds(bh, mt, grid):
    """With the snake, CTA c takes in round r the position the plain order gives CTA
    grid - 1 - c when r is odd (a partial last round too: its tiles go to the CTAs at its
    end), its own when r is even; so a CTA that took a round's heaviest tile takes the next
    round's lightest."""
    pos = c_position()
    for r in range(-(-bh * mt // grid)):
        for cta in range(grid):
            mirrored = pos(r, grid - 1 - cta, grid, False) if r % 2 else pos(r, cta, grid, False)
            assert pos(r, cta, grid, True) == mirrored, (r, cta)


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
def test_the_position_and_the_declarators_compiled_as_cpp_give_the_pythons(tmp_path):
    """POSITION and the declarators as nvcc compiles them (C's precedence, int division; a
    host program, ``gridDim`` and ``blockIdx`` variables): each CTA's tiles in its order, as
    position and tile_at give them."""
    cases = [(bh, mt, grid, o) for bh, mt, grid in SHAPES for o in ORDERS]
    decl = "const int " + ", ".join(order_exprs(True)) + ";"
    lam = "\n".join(POSITION)
    rows = "\n".join(f"    {{{bh}, {mt}, {grid}, {o.hg}, {int(o.snake)}}},"
                     for bh, mt, grid, o in cases)
    src = f"""#include <cstdio>
#include <algorithm>
using std::min;
struct Dim {{ unsigned x; }};
static const int CASES[][5] = {{
{rows}
}};
int main() {{
    for (const auto& c : CASES) {{
        const int BH = c[0], MT = c[1], hg = c[3], snake = c[4];
        const int TILES = BH * MT;
        const Dim gridDim = {{(unsigned)c[2]}};
        for (unsigned cta = 0; cta < gridDim.x; ++cta) {{
            const Dim blockIdx = {{cta}};
            {lam}
            for (int k = 0, tile = position(0); tile < TILES; tile = position(++k)) {{
                {decl}
                std::printf("%d %d\\n", bh, tile_m);
            }}
        }}
    }}
    return 0;
}}
"""
    cu, exe = tmp_path / "order.cu", tmp_path / "order"
    cu.write_text(src)
    built = subprocess.run([nvcc() or "nvcc", "-std=c++17", "-o", str(exe), str(cu)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    got = [(int(h), int(m)) for h, m in zip(out[::2], out[1::2])]
    want = []
    for bh, mt, grid, o in cases:
        for cta in range(grid):
            t = cta
            while (p := position(t, grid=grid, snake=o.snake)) < bh * mt:
                want.append(tile_at(p, causal=True, bh=bh, mt=mt, order=o))
                t += grid
    assert got == want


def simulate(trips, *, bh: int, grid: int, order: TileOrder) -> float:
    """The most work one CTA gets, by running the grid's loop CTA by CTA with the kernel's own
    C: each tile costs its query block's trips plus the per-tile overhead."""
    return max(sum(trips[m] + tile_order.TILE_OVERHEAD_BLOCKS for _, m in cta)
               for cta in kernel_tiles(bh, len(trips), grid, order))


def _trips(sq: int, sk: int, align: str = "top_left", bm: int = 128, bn: int = 128):
    b = LoopBounds(causal=True, block_m=bm, block_n=bn, align=align)
    return [b.trips(i, sq, sk) for i in range(-(-sq // bm))]


BUSY = [  # (trips, heads, grid)
    (_trips(4096, 4096), 64, 132),
    (_trips(1000, 4096, "bottom_right"), 24, 100),
    (_trips(4096, 1000, "bottom_right"), 12, 132),  # query blocks that see no key: 0 trips
    (_trips(777, 777), 13, 20),
    (_trips(2048, 2048, bm=128, bn=176), 5, 7),
    ([3], 1, 1),
    ([1, 2, 3], 3, 20),  # more CTAs than tiles: some idle
]


@pytest.mark.parametrize("trips,bh,grid", BUSY)
def test_busiest_is_the_grids_busiest_cta(trips, bh, grid):
    """busiest (vectorized) against the grid run tile by tile with the kernel's own order."""
    for order in ORDERS:
        want = simulate(trips, bh=bh, grid=grid, order=order)
        assert busiest(trips, bh=bh, grid=grid, order=order, np=np) == pytest.approx(want), order


def test_choose_leaves_the_default_where_its_busiest_cta_is_far_above_the_best():
    """D=128 causal S=4096 on the H100: 64 heads of 32 query blocks (trips 1 .. 32) on 132
    CTAs.  Groups of 8 leave a CTA far busier than the best order does."""
    trips = _trips(4096, 4096)
    assert trips == list(range(1, 33))
    got = choose(trips, bh=64, grid=132, np=np)
    assert got != TileOrder()
    default = simulate(trips, bh=64, grid=132, order=TileOrder())
    assert default / simulate(trips, bh=64, grid=132, order=got) > 1.15
    assert simulate(trips, bh=64, grid=132, order=got) == min(
        simulate(trips, bh=64, grid=132, order=o) for o in ORDERS)


def test_choose_keeps_the_default_within_a_tie_of_the_best():
    """60 heads of 64 query blocks on 132 CTAs: another order beats the default, by less than
    1%; the default stays (the order measured before the choice)."""
    trips = list(range(1, 65))
    loads = {o: simulate(trips, bh=60, grid=132, order=o) for o in ORDERS}
    best = min(loads.values())
    assert best < loads[TileOrder()] <= best * (1 + tile_order.TIE)
    assert choose(trips, bh=60, grid=132, np=np) == TileOrder()


SWEEP = [(_trips(sq, sk, align), bh, min(bh * -(-sq // 128), grid))
         for sq, sk, align in ((4096, 4096, "top_left"), (1024, 1024, "top_left"),
                               (1000, 3000, "bottom_right"), (8192, 8192, "top_left"),
                               (3000, 1000, "bottom_right"))
         for bh in (1, 3, 8, 12, 24, 48, 64, 96)
         for grid in (132, 114)]


def test_the_backward_keeps_no_default_among_ties_but_the_fewest_heads():
    """The backward's call (``keep=None``, bwd_call._order says why): among the orders within
    the tie the smallest group, then no snake, even where the default ties.  The KV-block
    costs of D 128 S 1k causal (8 blocks of 2 .. 16 query blocks, 256 heads, 132 CTAs): the
    forward's rule keeps the default there; the backward's takes one head at a time with the
    snake (what measured 1.175x the default on the H200)."""
    trips = [2 * (i + 1) for i in range(8)]
    loads = {o: simulate(trips, bh=256, grid=132, order=o) for o in ORDERS}
    best = min(loads.values())
    near = [o for o in ORDERS if loads[o] <= best * (1 + tile_order.TIE)]
    assert TileOrder() in near and TileOrder(hg=1, snake=True) in near
    assert choose(trips, bh=256, grid=132, np=np) == TileOrder()
    assert choose(trips, bh=256, grid=132, np=np, keep=None) == TileOrder(hg=1, snake=True)
    for trips, bh, grid in SWEEP:
        loads = {o: simulate(trips, bh=bh, grid=grid, order=o) for o in ORDERS}
        best = min(loads.values())
        near = [o for o in ORDERS if loads[o] <= best * (1 + tile_order.TIE)]
        assert choose(trips, bh=bh, grid=grid, np=np, keep=None) == min(
            near, key=lambda o: (o.hg, o.snake)), (len(trips), bh, grid)


def test_choose_is_never_busier_than_the_default_and_else_takes_the_least_loaded():
    """Over a sweep of shapes: the chosen order's busiest CTA is never above the default's,
    and within the tie of the best; the default where it is within the tie, else the least
    loaded order (an exact tie to the smallest group, then no snake)."""
    for trips, bh, grid in SWEEP:
        loads = {o: simulate(trips, bh=bh, grid=grid, order=o) for o in ORDERS}
        best = min(loads.values())
        got = choose(trips, bh=bh, grid=grid, np=np)
        case = (len(trips), bh, grid, got)
        assert loads[got] <= loads[TileOrder()], case
        assert loads[got] <= best * (1 + tile_order.TIE), case
        near = [o for o in ORDERS if loads[o] <= best * (1 + tile_order.TIE)]
        if TileOrder() in near:
            assert got == TileOrder(), case
        else:
            assert got == min(ORDERS, key=lambda o: (loads[o], o.hg, o.snake)), case


@pytest.mark.parametrize("bh,mt,near,want", [
    (17, 13, (TileOrder(hg=4), TileOrder(hg=8, snake=True)), TileOrder(hg=4)),
    (29, 11, (TileOrder(hg=16), TileOrder(hg=16, snake=True)), TileOrder(hg=16))])
def test_choose_without_the_default_in_the_tie_takes_the_least_loaded(bh, mt, near, want):
    """bh heads of mt query blocks on 132 CTAs: the orders ``near`` tie within TIE and beat the
    default; the call takes the least loaded of them."""
    trips = list(range(1, mt + 1))
    loads = {o: simulate(trips, bh=bh, grid=132, order=o) for o in ORDERS}
    best = min(loads.values())
    assert loads[TileOrder()] > best * (1 + tile_order.TIE)
    assert {o for o in ORDERS if loads[o] <= best * (1 + tile_order.TIE)} == set(near)
    assert choose(trips, bh=bh, grid=132, np=np) == want


def test_the_forward_takes_the_least_loaded_order_not_the_fewest_heads():
    """D 64 causal S 4096 on the call's 192-row tiles (128 heads of 22 query blocks, 132 CTAs):
    groups of 1, 2 and 4 with the snake lie within TIE of groups of 8 with the snake, the least
    loaded.  The forward takes the least loaded (it ran 1.067x one head at a time on the H200);
    the backward's rule would take one head at a time."""
    trips = [min(32, -(-(i + 1) * 192 // 128)) for i in range(22)]
    loads = {o: simulate(trips, bh=128, grid=132, order=o) for o in ORDERS}
    near = {o for o in ORDERS if loads[o] <= min(loads.values()) * (1 + tile_order.TIE)}
    assert {TileOrder(hg=1, snake=True), TileOrder(hg=8, snake=True)} <= near
    assert TileOrder() not in near
    assert choose(trips, bh=128, grid=132, np=np) == TileOrder(hg=8, snake=True)
    assert choose(trips, bh=128, grid=132, np=np, keep=None) == TileOrder(hg=1, snake=True)


def test_the_not_causal_declarators_read_no_order():
    """Not causal: head-major from the position alone (no hg, snake or grid)."""
    text = " ".join(order_exprs(False))
    assert not re.search(r"\b(p|hg|snake|gridDim)\b", text)


def _bwd_order():
    """The backward kernel's grouped order (emit_attention_bwd.tile_exprs, evaluated as C
    would): tile -> (KV head, KV block)."""
    from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
    from pipeline_core_schedules_attention.emit_attention_bwd import tile_exprs

    first, last = tile_exprs(BackwardTrips(causal=True, block_m=64, block_n=128,
                                           grouped=True))[:2]
    # "bhk = ..., rank = ..." split on the declarators' own ", name = " joints
    body = first.removeprefix("const int ").rstrip(";")
    decls = re.split(r", (?=(?:bhk|rank) = )", body)
    assert last == "const int nb = NB - 1 - rank;"
    code = [(name, compile(expr, name, "eval")) for name, expr in map(_c_to_python, decls)]
    assert [name for name, _ in code] == ["bhk", "rank"]

    def at(tile: int, *, bhk: int, nb: int, order: TileOrder) -> tuple[int, int]:
        env = {"tile": tile, "NB": nb, "BHK": bhk, "TILES": bhk * nb, "hg": order.hg,
               "min": min}
        for name, expr in code:
            env[name] = eval(expr, env)  # noqa: S307 - our own expression
        return env["bhk"], nb - 1 - env["rank"]
    return at


@pytest.mark.parametrize("bh,nb,grid", SHAPES)
def test_the_backwards_order_is_the_forwards_map_with_kv_blocks_heaviest_first(bh, nb, grid):
    """The backward's grouped order runs every (KV head, KV block) once, is tile_at's map with
    the block reversed (a KV block's work falls as its index grows, a query block's rises), and
    with hg 1 (the call's order without the mask) runs a head's KV blocks back to back."""
    at = _bwd_order()
    every = sorted((h, j) for h in range(bh) for j in range(nb))
    for order in ORDERS:
        kernel = [at(p, bhk=bh, nb=nb, order=order) for p in range(bh * nb)]
        assert sorted(kernel) == every, order
        host = [tile_at(p, causal=True, bh=bh, mt=nb, order=order) for p in range(bh * nb)]
        assert kernel == [(h, nb - 1 - m) for h, m in host], order
    assert [at(p, bhk=bh, nb=nb, order=TileOrder(hg=1)) for p in range(bh * nb)] == [
        (p // nb, p % nb) for p in range(bh * nb)]

"""Symbolic data flow over the warp traces: find every hazard, for all timings.

Each LDS buffer ``(channel, stage, subtile)`` holds a sequence of *versions*; the
j-th load of a buffer in every warp writes that warp's part of version j (loads are
cooperative).  A fragment read sees version j* = the newest version any part of
which was issued before the read (happens-before); it is safe iff every warp's part
of j* retired before the read (else LDS_RAW) and no warp's part of j*+1 can be
issued before the read retired (else LDS_WAR).  Registers and accumulators then
follow program order: every MMA must combine A and B of one K step and each
accumulator must receive every K step exactly once, in order.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Any

import attrs

from pipeline_core.check.fixes import completion_fix, move_fix, review_fix
from pipeline_core.check.program import CheckProgram, Kind
from pipeline_core.check.trace import WarpTrace, barrier_counts
from pipeline_core.check.verdict import HazardKind, Site, Violation

LdsKey = tuple[int, int, int]
KStep = tuple[int, int]  #: (tile, slice)


@attrs.frozen
class Analysis:
    violations: tuple[Violation, ...]
    #: (trace number, position) of each fragment read -> the K step it delivers
    reads: dict[tuple[int, int], KStep]


def site_of(trace: WarpTrace, pos: int) -> Site:
    ev = trace.events[pos]
    return Site(ev.instr.phase, ev.instr.index, ev.iteration, trace.group, trace.lane,
                ev.instr.describe())


def _order(trace: WarpTrace, t: int, pos: int) -> tuple:
    return (trace.bphase[pos], trace.group, trace.lane, pos)


def _lds_writes(program: CheckProgram, trace: WarpTrace):
    """buffer -> ([positions], [tile]) of the LDS writes of one warp, in program order."""
    direct = program.model.global_loads_write_lds
    staging: dict[int, tuple[int, int]] = {}  # channel -> (tile, load position)
    loads_seen: dict[int, int] = {}
    out: dict[LdsKey, tuple[list[int], list[int]]] = {}
    store_src: dict[int, tuple[int, int] | None] = {}
    for p, ev in enumerate(trace.events):
        ins = ev.instr
        if ins.kind is Kind.LOAD:
            if ins.k_shift is not None:
                tile = ev.k_base + ins.k_shift
            else:
                tile = loads_seen.get(ins.channel, 0)
                loads_seen[ins.channel] = tile + 1
            if direct:
                pos, tiles = out.setdefault((ins.channel, ins.stage, ins.subtile), ([], []))
                pos.append(p)
                tiles.append(tile)
            else:
                staging[ins.channel] = (tile, p)
        elif ins.kind is Kind.STORE:
            src = staging.get(ins.channel)
            store_src[p] = src
            tile = src[0] if src else -1
            for s in program.slices:
                pos, tiles = out.setdefault((ins.channel, ins.stage, s), ([], []))
                pos.append(p)
                tiles.append(tile)
    return out, store_src


def _expected(program: CheckProgram, traces: tuple[WarpTrace, ...]) -> list[KStep]:
    if program.single_buffer:
        first = traces[0]
        tiles = sum(1 for e in first.events if e.instr.kind is Kind.LOAD
                    and e.instr.channel == min((x.instr.channel for x in first.events
                                                if x.instr.kind is Kind.LOAD), default=0))
        return [(t, s) for t in range(tiles) for s in program.slices]
    k_end = max((e.k_base for e in traces[0].events), default=0)
    return [(t, 0) for t in range(k_end)]


def analyse(program: CheckProgram, traces: tuple[WarpTrace, ...]) -> Analysis:
    """All violations of ``traces`` (sorted in a canonical execution order)."""
    model = program.model
    counters = {c.name: c for c in model.counters}
    found: list[Violation] = []
    reads: dict[tuple[int, int], KStep] = {}

    counts = barrier_counts(traces)
    if len(set(counts)) > 1:
        lo = min(range(len(traces)), key=lambda i: counts[i])
        t = traces[lo]
        last = len(t.events) - 1
        found.append(Violation(
            HazardKind.BARRIER_MISMATCH, site_of(t, last),
            f"warps execute different numbers of barriers ({', '.join(f'{x.label}: {c}' for x, c in zip(traces, counts))}); "
            "the workgroup hangs at the first unmatched s_barrier",
            fix=review_fix(t, last, "make every warp group execute the same number of barriers"),
            order=(-1,)))

    lds = []
    stores = []
    for t in traces:
        w, s = _lds_writes(program, t)
        lds.append(w)
        stores.append(s)

    def add(kind, trace, t_idx, pos, message, other=None, fix=None):
        found.append(Violation(kind, site_of(trace, pos), message,
                               other=site_of(*other) if other else None, fix=fix,
                               order=_order(trace, t_idx, pos)))

    def queued_before(a_trace: WarpTrace, a: int, b_trace: WarpTrace, b: int) -> bool:
        """Same warp, same in-order counter, ``a`` first: the memory unit performs them in
        issue order (an LDS write after an LDS read of one warp cannot overtake it)."""
        if a_trace is not b_trace or a >= b:
            return False
        ca, cb = a_trace.events[a].instr.counter, b_trace.events[b].instr.counter
        return ca == cb and ca is not None and counters[ca].in_order

    war_seen: set = set()
    for xi, X in enumerate(traces):
        for p, ev in enumerate(X.events):
            ins = ev.instr
            if ins.kind is not Kind.FRAG:
                continue
            key = (ins.channel, ins.stage, ins.subtile)
            jstar = -1
            for yi, Y in enumerate(traces):
                w = lds[yi].get(key)
                if not w:
                    continue
                limit = p if Y is X else Y.phase_start[min(X.bphase[p], len(Y.phase_start) - 1)]
                jstar = max(jstar, bisect_left(w[0], limit) - 1)
            if jstar < 0:
                add(HazardKind.LDS_RAW, X, xi, p,
                    f"reads LDS buffer ch{key[0]} s{key[1]} sub{key[2]} before any load of it "
                    "is known to have been issued",
                    fix=review_fix(X, p, "load this buffer (and wait for it) before reading it"))
                continue
            tile = None
            for yi, Y in enumerate(traces):
                w = lds[yi].get(key)
                if not w or jstar >= len(w[0]):
                    add(HazardKind.LDS_RAW, X, xi, p,
                        f"{Y.label} never writes its part of version {jstar} of buffer "
                        f"ch{key[0]} s{key[1]} sub{key[2]}")
                    continue
                lp = w[0][jstar]
                tile = w[1][jstar] if tile is None else tile
                f = Y.forced[lp]
                if (f is None or not Y.before(f, X, p)) and not queued_before(Y, lp, X, p):
                    cspec = counters[Y.events[lp].instr.counter]
                    add(HazardKind.LDS_RAW, X, xi, p,
                        f"may read tile k={w[1][jstar]} of buffer ch{key[0]} s{key[1]} sub{key[2]} "
                        f"before {Y.label}'s write of it retired"
                        + ("" if Y is X else " and a barrier published it"),
                        other=(Y, lp), fix=completion_fix(Y, lp, X, p, cspec))
                if jstar + 1 < len(w[0]):
                    q = w[0][jstar + 1]
                    fr = X.forced[p]
                    if (fr is None or not X.before(fr, Y, q)) and not queued_before(X, p, Y, q) \
                            and (yi, q, xi, p) not in war_seen:
                        war_seen.add((yi, q, xi, p))
                        cspec = counters[ins.counter]
                        found.append(Violation(
                            HazardKind.LDS_WAR, site_of(Y, q),
                            f"may overwrite buffer ch{key[0]} s{key[1]} sub{key[2]} (tile "
                            f"k={w[1][jstar]} -> k={w[1][jstar + 1]}) while {X.label}'s read of it "
                            "may still be in flight",
                            other=site_of(X, p), fix=completion_fix(X, p, Y, q, cspec),
                            order=_order(Y, yi, q)))
            kslice = ins.subtile if program.single_buffer else 0
            reads[(xi, p)] = (tile if tile is not None else -1, kslice)

    expected = _expected(program, traces)
    rank = {k: i for i, k in enumerate(expected)}
    for xi, X in enumerate(traces):
        regs: dict[tuple[int, int], tuple[KStep, int]] = {}
        progress: dict[tuple[int, ...], int] = {}
        done: dict[tuple[int, ...], set] = {}
        for p, ev in enumerate(X.events):
            ins = ev.instr
            if ins.kind is Kind.FRAG:
                regs[(ins.channel, ins.subtile)] = (reads[(xi, p)], p)
            elif ins.kind is Kind.STORE and not model.register_interlock:
                src = stores[xi].get(p)
                if src is not None:
                    f = X.forced[src[1]]
                    if f is None or f >= p:
                        add(HazardKind.REG_RAW, X, xi, p,
                            "stores staging registers before the global load filling them retired",
                            other=(X, src[1]),
                            fix=completion_fix(X, src[1], X, p, counters[X.events[src[1]].instr.counter]))
            elif ins.kind is Kind.MMA:
                vals = []
                for reg in ins.operands:
                    got = regs.get(reg)
                    if got is None:
                        add(HazardKind.REG_RAW, X, xi, p,
                            f"reads fragment register ch{reg[0]} #{reg[1]} that was never loaded",
                            fix=review_fix(X, p, "load the fragment before this MMA"))
                        vals = None
                        break
                    if not model.register_interlock:
                        f = X.forced[got[1]]
                        if f is None or f >= p:
                            add(HazardKind.REG_RAW, X, xi, p,
                                f"may read register ch{reg[0]} #{reg[1]} before its fragment load retired",
                                other=(X, got[1]),
                                fix=completion_fix(X, got[1], X, p, counters[X.events[got[1]].instr.counter]))
                    vals.append(got)
                if vals is None:
                    continue
                acc = ins.acc
                want_i = progress.get(acc, 0)
                want = expected[want_i] if want_i < len(expected) else None
                steps = {v[0] for v in vals}
                if len(steps) > 1:
                    newer = [v for v in vals if want is not None and rank.get(v[0], -1) > want_i]
                    if want is not None and any(v[0] == want for v in vals) and newer:
                        w = max(newer, key=lambda v: v[1])
                        add(HazardKind.REG_WAR, X, xi, p,
                            f"operand register was overwritten (now K step {w[0]}) before this MMA "
                            f"consumed K step {want}", other=(X, w[1]), fix=move_fix(X, w[1], p))
                    else:
                        add(HazardKind.WRONG_K_STEP, X, xi, p,
                            "combines operands of different K steps: "
                            + ", ".join(f"ch{r[0]}#{r[1]}=k{v[0][0]}" for r, v in zip(ins.operands, vals)),
                            other=(X, max(vals, key=lambda v: v[1])[1]),
                            fix=review_fix(X, p, "load both operands of the same K step before the MMA"))
                    continue
                step = vals[0][0]
                seen = done.setdefault(acc, set())
                if step == want:
                    progress[acc] = want_i + 1
                    seen.add(step)
                elif step in seen:
                    add(HazardKind.DUPLICATE_PRODUCT, X, xi, p,
                        f"accumulates product {acc} at K step {step} a second time",
                        other=(X, vals[0][1]),
                        fix=review_fix(X, p, "the fragment registers were not reloaded since the last MMA"))
                elif step in rank and rank[step] > want_i:
                    add(HazardKind.MISSING_PRODUCT, X, xi, p,
                        f"skips product {acc} at K step {want} (accumulates K step {step} instead)",
                        other=(X, vals[0][1]),
                        fix=review_fix(X, p, f"an MMA for {acc} at K step {want} is missing before this one"))
                    progress[acc] = rank[step] + 1
                    seen.add(step)
                else:
                    add(HazardKind.WRONG_K_STEP, X, xi, p,
                        f"accumulates K step {step} into {acc}, which expects K step {want}",
                        other=(X, vals[0][1]),
                        fix=review_fix(X, p, "the operands hold a K step outside the loop"))
        last = len(X.events) - 1
        for acc in program.accumulators:
            i = progress.get(acc, 0)
            if i < len(expected):
                found.append(Violation(
                    HazardKind.MISSING_PRODUCT, site_of(X, last),
                    f"product {acc} never accumulates K step {expected[i]} "
                    f"({len(expected) - i} of {len(expected)} K steps missing)",
                    fix=review_fix(X, last, "every MMA of every K step must run once"),
                    order=(float("inf"), X.group, X.lane, last)))
    found.sort(key=lambda v: v.order)
    return Analysis(tuple(found), reads)


def summary(analysis: Analysis) -> dict[str, Any]:
    return {"violations": len(analysis.violations)}

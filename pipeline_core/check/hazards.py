"""Symbolic data flow over the warp traces: find every hazard, for all timings.

Each LDS buffer ``(channel, stage, subtile)`` holds a sequence of *versions*; the
j-th load of a buffer in every warp writes that warp's part of version j (loads are
cooperative).  A fragment read sees version j* = the newest version any part of
which was issued before the read (happens-before); it is safe iff every warp's part
of j* retired before the read (else LDS_RAW) and no warp's part of j*+1 can be
issued before the read retired (else LDS_WAR) -- unless the model's ``lds_in_order``
assumption holds for it: the read was issued before that global->LDS load, so the
LDS services it before the load's data lands.  Registers and accumulators then
follow program order: every MMA must combine A and B of one K step and each
accumulator must receive every K step exactly once, in order.
"""
from __future__ import annotations

from bisect import bisect_left

import attrs

from pipeline_core.check.counters import CounterSpec
from pipeline_core.check.fixes import completion_fix, move_fix, review_fix
from pipeline_core.check.program import CheckProgram, Kind
from pipeline_core.check.trace import WarpTrace
from pipeline_core.check.verdict import Fix, HazardKind, Site, Violation

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


def _order(trace: WarpTrace, pos: int) -> tuple:
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
    if program.single_buffer or program.ordinal_tiles:
        first = traces[0]
        # the lowest channel's loads count the tiles (found once: per load it was quadratic)
        channel = min((x.instr.channel for x in first.events if x.instr.kind is Kind.LOAD),
                      default=0)
        tiles = sum(1 for e in first.events if e.instr.kind is Kind.LOAD
                    and e.instr.channel == channel)
        return [(t, s) for t in range(tiles) for s in program.slices]
    k_end = max((e.k_base for e in traces[0].events), default=0)
    return [(t, 0) for t in range(k_end)]


@attrs.frozen
class _Context:
    """What every hazard pass needs: the program, the warps and their LDS writes."""

    program: CheckProgram
    traces: tuple[WarpTrace, ...]
    counters: dict[str, CounterSpec]
    lds: tuple  #: per warp: buffer -> ([positions], [tiles])
    stores: tuple  #: per warp: store position -> (tile, staging load position) | None

    def queued_before(self, a_trace: WarpTrace, a: int, b_trace: WarpTrace, b: int) -> bool:
        """Same warp, same in-order counter, ``a`` first: the memory unit performs them in
        issue order (an LDS write after an LDS read of one warp cannot overtake it)."""
        if a_trace is not b_trace or a >= b:
            return False
        ca, cb = a_trace.events[a].instr.counter, b_trace.events[b].instr.counter
        return ca == cb and ca is not None and self.counters[ca].in_order

    def completion_fix(self, issuer: WarpTrace, issued: int, user: WarpTrace, use: int) -> Fix:
        """The fix that retires ``issuer[issued]`` before ``user[use]``: the one lookup of the
        op's counter, None for an op synchronous for its issuer (no wait can retire it)."""
        name = issuer.events[issued].instr.counter
        return completion_fix(issuer, issued, user, use,
                              self.counters[name] if name is not None else None)

    def serviced_before_load(self, r_trace: WarpTrace, r: int, w_trace: WarpTrace, w: int) -> bool:
        """``lds_in_order``: the LDS read at ``r_trace[r]`` is serviced before the LDS write of
        the global->LDS load at ``w_trace[w]`` lands, because the read's issue happens before
        the load's issue and the LDS services its accesses in arrival order."""
        return (self.program.model.lds_in_order and self.program.model.global_loads_write_lds
                and w_trace.events[w].instr.kind is Kind.LOAD and r_trace.before(r, w_trace, w))

    def retired_before(self, a_trace: WarpTrace, a: int, b_trace: WarpTrace, b: int) -> bool:
        """Is the async op at ``a_trace[a]`` guaranteed complete before ``b_trace[b]`` starts?"""
        f = a_trace.forced[a]
        return (f is not None and a_trace.before(f, b_trace, b)) or \
            self.queued_before(a_trace, a, b_trace, b)


def _violation(kind: HazardKind, trace: WarpTrace, pos: int, message: str, other=None,
               fix=None) -> Violation:
    return Violation(kind, site_of(trace, pos), message,
                     other=site_of(*other) if other else None, fix=fix, order=_order(trace, pos))


def _read_hazards(ctx: _Context) -> tuple[list[Violation], dict]:
    """LDS_RAW / LDS_WAR of every fragment read, and the K step each read delivers."""
    found: list[Violation] = []
    reads: dict[tuple[int, int], KStep] = {}
    war_seen: set = set()
    for xi, X in enumerate(ctx.traces):
        for p, ev in enumerate(X.events):
            ins = ev.instr
            if ins.kind is not Kind.FRAG:
                continue
            # ring lowering (ordinal tiles): a load fills its channel's whole stage, and a
            # fragment subtile is a K slice of that stage, so the buffer read is the stage's
            key = (ins.channel, ins.stage, 0 if ctx.program.ordinal_tiles else ins.subtile)
            name = f"ch{key[0]} s{key[1]} sub{key[2]}"
            kslice = ins.subtile if ctx.program.single_buffer else 0
            # j*: the newest version any warp's part of which was issued before the read.
            jstar = -1
            for yi, Y in enumerate(ctx.traces):
                w = ctx.lds[yi].get(key)
                if w:
                    limit = p if Y is X else Y.phase_start[min(X.bphase[p], len(Y.phase_start) - 1)]
                    jstar = max(jstar, bisect_left(w[0], limit) - 1)
            reads[(xi, p)] = (-1, kslice)
            if jstar < 0:
                found.append(_violation(
                    HazardKind.LDS_RAW, X, p,
                    f"reads LDS buffer {name} before any load of it is known to have been issued",
                    fix=review_fix(X, p, "load this buffer (and wait for it) before reading it")))
                continue
            for yi, Y in enumerate(ctx.traces):
                positions, tiles = ctx.lds[yi][key]  # every warp runs the same entries
                lp = positions[jstar]
                if not ctx.retired_before(Y, lp, X, p):
                    found.append(_violation(
                        HazardKind.LDS_RAW, X, p,
                        f"may read tile k={tiles[jstar]} of buffer {name} before {Y.label}'s write "
                        "of it retired" + ("" if Y is X else " and a barrier published it"),
                        other=(Y, lp),
                        fix=ctx.completion_fix(Y, lp, X, p)))
                if jstar + 1 < len(positions):
                    q = positions[jstar + 1]
                    if not ctx.retired_before(X, p, Y, q) and not ctx.serviced_before_load(X, p, Y, q) \
                            and (yi, q, xi, p) not in war_seen:
                        war_seen.add((yi, q, xi, p))
                        found.append(_violation(
                            HazardKind.LDS_WAR, Y, q,
                            f"may overwrite buffer {name} (tile k={tiles[jstar]} -> "
                            f"k={tiles[jstar + 1]}) while {X.label}'s read of it may still be in flight",
                            other=(X, p), fix=ctx.completion_fix(X, p, Y, q)))
            reads[(xi, p)] = (ctx.lds[xi][key][1][jstar], kslice)
    return found, reads


def _register_raw(ctx: _Context, X: WarpTrace, writer: int, p: int, what: str) -> Violation | None:
    """Without interlock, a register use needs an emitted wait to have retired its writer."""
    if ctx.program.model.register_interlock or ctx.retired_before(X, writer, X, p):
        return None
    return _violation(HazardKind.REG_RAW, X, p, what, other=(X, writer),
                      fix=ctx.completion_fix(X, writer, X, p))


def _mma_hazards(ctx: _Context, reads: dict) -> list[Violation]:
    """Register and accumulator data flow, in program order, per warp."""
    found: list[Violation] = []
    expected = _expected(ctx.program, ctx.traces)
    rank = {k: i for i, k in enumerate(expected)}
    for xi, X in enumerate(ctx.traces):
        regs: dict[tuple[int, int], tuple[KStep, int]] = {}
        previous: dict[tuple[int, int], KStep] = {}  # value a register held before its last write
        progress: dict[tuple[int, ...], int] = {}
        done: dict[tuple[int, ...], set] = {}
        for p, ev in enumerate(X.events):
            ins = ev.instr
            if ins.kind is Kind.FRAG:
                reg = (ins.channel, ins.subtile)
                if reg in regs:
                    previous[reg] = regs[reg][0]
                regs[reg] = (reads[(xi, p)], p)
            elif ins.kind is Kind.STORE and ctx.stores[xi].get(p) is not None:
                v = _register_raw(ctx, X, ctx.stores[xi][p][1], p,
                                  "stores staging registers before the global load filling them retired")
                if v:
                    found.append(v)
            elif ins.kind is Kind.MMA:
                missing = [reg for reg in ins.operands if reg not in regs]
                if missing:
                    reg = missing[0]
                    found.append(_violation(
                        HazardKind.REG_RAW, X, p,
                        f"reads fragment register ch{reg[0]} #{reg[1]} that was never loaded",
                        fix=review_fix(X, p, "load the fragment before this MMA")))
                    continue
                vals = [regs[reg] for reg in ins.operands]
                for reg, got in zip(ins.operands, vals):
                    v = _register_raw(ctx, X, got[1], p, f"may read register ch{reg[0]} #{reg[1]} "
                                                          "before its fragment load retired")
                    if v:
                        found.append(v)
                found.extend(_accumulate(X, p, ins, vals, expected, rank, progress, done, previous))
        last = max((q for q, e in enumerate(X.events) if e.instr.index >= 0), default=0)
        for acc in ctx.program.accumulators:
            i = progress.get(acc, 0)
            if i < len(expected):
                found.append(Violation(
                    HazardKind.MISSING_PRODUCT, site_of(X, last),
                    f"product {acc} never accumulates K step {expected[i]} "
                    f"({len(expected) - i} of {len(expected)} K steps missing)",
                    fix=review_fix(X, last, "every MMA of every K step must run once"),
                    order=(float("inf"), X.group, X.lane, last)))
    return found


def _accumulate(X: WarpTrace, p: int, ins, vals, expected, rank, progress, done, previous) -> list[Violation]:
    """One MMA: same K step on every operand, and the next K step of its accumulator."""
    acc = ins.acc
    want_i = progress.get(acc, 0)
    want = expected[want_i] if want_i < len(expected) else None
    if len({v[0] for v in vals}) > 1:
        # REG_WAR: a register that held the wanted K step was reloaded too early.
        clobbered = [v for r, v in zip(ins.operands, vals) if v[0] != want and previous.get(r) == want]
        if want is not None and any(v[0] == want for v in vals) and clobbered:
            w = max(clobbered, key=lambda v: v[1])
            return [_violation(HazardKind.REG_WAR, X, p,
                               f"operand register was overwritten (now K step {w[0]}) before this "
                               f"MMA consumed K step {want}", other=(X, w[1]), fix=move_fix(X, w[1], p))]
        return [_violation(HazardKind.WRONG_K_STEP, X, p,
                           "combines operands of different K steps: "
                           + ", ".join(f"ch{r[0]}#{r[1]}=k{v[0][0]}" for r, v in zip(ins.operands, vals)),
                           other=(X, max(vals, key=lambda v: v[1])[1]),
                           fix=review_fix(X, p, "load both operands of the same K step before the MMA"))]
    step = vals[0][0]
    seen = done.setdefault(acc, set())
    if step == want:
        progress[acc] = want_i + 1
        seen.add(step)
        return []
    if step in seen:
        return [_violation(HazardKind.DUPLICATE_PRODUCT, X, p,
                           f"accumulates product {acc} at K step {step} a second time",
                           other=(X, vals[0][1]),
                           fix=review_fix(X, p, "the fragment registers were not reloaded since the last MMA"))]
    if step in rank and rank[step] > want_i:
        progress[acc] = rank[step] + 1
        seen.add(step)
        return [_violation(HazardKind.MISSING_PRODUCT, X, p,
                           f"skips product {acc} at K step {want} (accumulates K step {step} instead)",
                           other=(X, vals[0][1]),
                           fix=review_fix(X, p, f"an MMA for {acc} at K step {want} is missing before this one"))]
    return [_violation(HazardKind.WRONG_K_STEP, X, p,
                       f"accumulates K step {step} into {acc}, which expects K step {want}",
                       other=(X, vals[0][1]),
                       fix=review_fix(X, p, "the operands hold a K step outside the loop"))]


def _kernel_products(program: CheckProgram) -> list[Violation]:
    """MISSING_PRODUCT for each accumulator no kernel MMA accumulates.

    The kernel is the loop: each iteration must accumulate every product the body
    declares.  A kernel without its MMAs (a kernel transform returning ``()``, a document
    with ``"kernel": []``) loads and multiplies nothing per iteration, so the data-flow
    pass above, which expects only the K tiles that were loaded, would find the remaining
    prologue and epilogue self-consistent and call the schedule safe
    (pipeline_core/check/README.md, "Model").
    """
    in_kernel = {i.acc for i in program.kernel if i.kind is Kind.MMA}
    end = len(program.kernel)  # where the missing MMA belongs: the kernel's end
    found: list[Violation] = []
    for acc in program.accumulators:
        if acc in in_kernel:
            continue
        found.append(Violation(
            HazardKind.MISSING_PRODUCT, Site("kernel", end, 0, 0, 0, "end of the kernel"),
            f"no kernel MMA accumulates product {acc}, so the loop never computes it",
            fix=Fix("review", "kernel", end, f"put the body's MMA for product {acc} back into "
                                             "the kernel (a kernel transform must keep every MMA)"),
            order=(float("inf"), -1, -1, len(found))))
    return found


def analyse(program: CheckProgram, traces: tuple[WarpTrace, ...]) -> Analysis:
    """All violations of ``traces`` (sorted in a canonical execution order)."""
    writes = [_lds_writes(program, t) for t in traces]
    ctx = _Context(program, traces, {c.name: c for c in program.model.counters},
                   tuple(w for w, _ in writes), tuple(s for _, s in writes))
    found, reads = _read_hazards(ctx)
    found.extend(_mma_hazards(ctx, reads))
    found.extend(_kernel_products(program))
    found.sort(key=lambda v: v.order)
    return Analysis(tuple(found), reads)

"""An independent, brute-force oracle for the hazard checker (test helper).

It shares no code with ``pipeline_core.check``: it reads the raw document, runs
the warps as concurrent state machines with *concrete* LDS contents and registers,
and lets a seeded random adversary pick every interleaving choice: which warp
steps next, and when each outstanding counter op retires (in order).  A trial
fails when the computation goes wrong: a torn or stale LDS read, an MMA on
operands of different K steps, an accumulator that does not receive every K step
exactly once in order, or a hang.  A failing trial is a concrete witness that the
schedule is unsafe; many passing trials are (only) evidence that it is safe.

``lds_in_order`` (default True, the AMD model) is the hardware-ordering assumption of
``CounterModel.lds_in_order``, modelled physically: the LDS services accesses in
arrival order, so every fragment read of a buffer that is in flight when a global->LDS
load of that buffer is *issued* (in real time, by any warp) completes before any part
of that load's data lands.  False lets the data land at any time (the strict model).
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

BARRIER, WAIT_VM, WAIT_LGKM = 128, 129, 130
GLOBAL_LOAD, SHARED_STORE, FRAGMENT_LOAD, COMPUTE = 0, 1, 2, 3
GARBAGE = "garbage"


@dataclass
class Op:
    kind: str  # load store frag mma barrier wait nop
    ch: int = 0
    stage: int = 0
    sub: int = 0
    shift: int | None = None
    counter: str = ""
    cost: int = 0
    value: int = 0
    where: str = ""
    k_base: int = 0


def _costs(doc):
    cfg, sc = doc["config"], doc.get("schedule_config") or {}
    vm = [cfg["vm_per_load_a"] or 1, cfg["vm_per_load_b"] or 1]
    lg = [cfg["lgkm_per_load_a"] or sc.get("lgkm_per_load_a", 0) or 1,
          cfg["lgkm_per_load_b"] or sc.get("lgkm_per_load_b", 0) or 1]
    return vm, lg


def _ops(doc, phase, single):
    vm, lg = _costs(doc)
    chan = {}
    for o in doc.get("body", []) + [e["op"] for e in doc["kernel"]]:
        if o["channel"] >= 0 and o["role"] in (GLOBAL_LOAD, FRAGMENT_LOAD, SHARED_STORE):
            chan[o["tag"]] = o["channel"]
    out = []
    for i, e in enumerate(doc[phase]):
        o = e["op"]
        where = f"{phase}[{i}]"
        t, r = o["tag"], o["role"]
        ch = o["channel"] if o["channel"] >= 0 else chan.get(t, 0)
        if t == BARRIER:
            out.append(Op("barrier", where=where))
        elif t in (WAIT_VM, WAIT_LGKM):
            out.append(Op("wait", counter="vm" if t == WAIT_VM else "lgkm", value=o["wait_value"], where=where))
        elif t >= 128:
            out.append(Op("nop", where=where))
        elif r == GLOBAL_LOAD:
            k = o["k_offset"]
            out.append(Op("load", ch, o["stage"], o["subtile"], None if single else (-1 if k == 3 else k),
                          "vm", vm[ch], where=where))
        elif r == SHARED_STORE:
            out.append(Op("store", ch, o["stage"], o["subtile"], counter="lgkm", cost=1, where=where))
        elif r == FRAGMENT_LOAD:
            out.append(Op("frag", ch, o["stage"], o["subtile"], counter="lgkm", cost=lg[ch], where=where))
        elif r == COMPUTE:
            out.append(Op("mma", 0, o["stage"], o["subtile"], where=where))
        else:
            out.append(Op("nop", where=where))
    return out


def programs(doc, iterations, warps_per_group=1):
    """One op list per warp, following the kernels' consumption rules
    (docs/guide/reference-behaviours.md, "Warp stagger")."""
    single = doc["config"]["depth"] == 1
    pro = _ops(doc, "prologue", single)
    ker = _ops(doc, "kernel", single)
    epi = _ops(doc, "epilogue", single)
    ws = doc["warp_stagger_index"]
    groups = 2 if doc["config"]["warp_stagger"]["enabled"] and ws <= len(pro) else 1
    progs = []
    for g in range(groups):
        p = []
        cut = ws if groups == 2 else len(pro)
        p += [Op(**{**o.__dict__, "k_base": 0}) for o in pro[:cut]]
        if groups == 2 and g == 1:
            p.append(Op("barrier", where="stagger"))
        p += [Op(**{**o.__dict__, "k_base": 0}) for o in pro[cut:]]
        if groups == 2:
            p.append(Op("barrier", where="launch"))
        for it in range(1, iterations + 1):
            p += [Op(**{**o.__dict__, "k_base": 2 * it, "where": o.where + f"#it{it}"}) for o in ker]
        p += [Op(**{**o.__dict__, "k_base": 2 * (iterations + 1)}) for o in epi]
        if groups == 2 and g == 0:
            p.append(Op("barrier", where="tail"))
        progs += [p] * warps_per_group
    return progs, single


@dataclass
class Warp:
    prog: list
    pc: int = 0
    queues: dict = field(default_factory=lambda: {"vm": deque(), "lgkm": deque()})
    at_barrier: bool = False
    barriers: int = 0
    regs: dict = field(default_factory=dict)  # reg -> value (tile/kstep or GARBAGE)
    pending_reg: dict = field(default_factory=dict)  # reg -> token of the in-flight write
    staging: dict = field(default_factory=dict)
    loads_seen: dict = field(default_factory=dict)
    acc: dict = field(default_factory=dict)


class Failure(Exception):
    pass


def trial(doc, iterations, rng, warps_per_group=1, lds_in_order=True):
    """Run one random execution; return None (correct) or a failure description."""
    progs, single = programs(doc, iterations, warps_per_group)
    warps = [Warp(p) for p in progs]
    drains = single  # fenced barrier() in the single-buffer kernel
    slices = sorted({o.sub for o in progs[0] if o.kind == "frag"}) if single else [0]
    lds: dict = {}  # buffer -> {part: tile}
    inflight: dict = {}  # buffer -> set of read tokens
    torn: set = set()
    reader: dict = {}  # read token -> warp
    speed = [rng.choice([0.05, 0.3, 1, 5, 30]) for _ in warps]
    rates = [{c: rng.choice([0.003, 0.03, 0.3, 3, 30]) for c in ("vm", "lgkm")} for _ in warps]
    token = 0

    def fail(msg):
        raise Failure(msg)

    def complete(wi, ctr):
        w = warps[wi]
        item = w.queues[ctr].popleft()
        kind, op, part, last, data, _ = item
        if kind == "load" and not single:
            buf = (op.ch, op.stage, op.sub)
            lds.setdefault(buf, {})[("ld", part, wi)] = data
            for tok in inflight.get(buf, ()):
                torn.add(tok)
        elif kind == "load":
            if last:
                w.staging[op.ch] = data
                w.pending_reg.pop(("stg", op.ch), None)
        elif kind == "store":
            for s in slices:
                buf = (op.ch, op.stage, s)
                lds.setdefault(buf, {})[("st", part, wi)] = data
                for tok in inflight.get(buf, ()):
                    if reader[tok] != wi:  # one warp's LDS ops execute in issue order
                        torn.add(tok)
        elif kind == "frag" and last:
            buf, tok, _, reg = data
            inflight[buf].discard(tok)
            snap = lds.get(buf, {})  # performed in issue order with this warp's LDS ops
            value = GARBAGE
            vals = set(snap.values())
            expect_parts = len(warps) * (1 if single else parts_per_load(op.ch))
            if tok not in torn and len(vals) == 1 and len(snap) == expect_parts:
                value = next(iter(vals))
            if w.pending_reg.get(reg) == tok:
                w.regs[reg] = (value, op.sub if single else 0) if value != GARBAGE else GARBAGE
                del w.pending_reg[reg]

    def parts_per_load(ch):
        """Each vm op of a warp's load writes one part of the tile."""
        return _costs(doc)[0][ch]

    def enabled(wi):
        w = warps[wi]
        if w.pc >= len(w.prog) or w.at_barrier:
            return False
        op = w.prog[w.pc]
        if op.kind == "wait":
            return len(w.queues[op.counter]) <= op.value
        if op.kind == "barrier" and drains:
            return not w.queues["vm"] and not w.queues["lgkm"]
        if op.kind == "mma":
            regs = [(0, op.sub)] if single else [(0, op.stage), (1, op.sub)]
            return all(r not in w.pending_reg for r in regs)
        if op.kind == "store":
            return ("stg", op.ch) not in w.pending_reg
        return True

    def step(wi):
        nonlocal token
        w = warps[wi]
        op = w.prog[w.pc]
        w.pc += 1
        if op.kind == "load":
            if op.shift is not None:
                tile = op.k_base + op.shift
            else:
                tile = w.loads_seen.get(op.ch, 0)
                w.loads_seen[op.ch] = tile + 1
            if single:
                w.pending_reg[("stg", op.ch)] = True
            # In-order LDS: the reads of this buffer already issued are serviced first.
            earlier = frozenset(inflight.get((op.ch, op.stage, op.sub), ())) \
                if lds_in_order and not single else frozenset()
            for i in range(op.cost):
                w.queues["vm"].append(("load", op, i, i == op.cost - 1, tile, earlier))
        elif op.kind == "store":
            data = w.staging.get(op.ch, GARBAGE)
            w.queues["lgkm"].append(("store", op, 0, True, data, frozenset()))
        elif op.kind == "frag":
            buf = (op.ch, op.stage, op.sub)
            token += 1
            reg = (op.ch, op.sub)
            inflight.setdefault(buf, set()).add(token)
            reader[token] = wi
            snap = None
            w.pending_reg[reg] = token
            for i in range(op.cost):
                w.queues["lgkm"].append(("frag", op, i, i == op.cost - 1, (buf, token, snap, reg),
                                         frozenset()))
        elif op.kind == "mma":
            if single:
                regs, acc = [(0, op.sub)], (0, 0)
            else:
                regs, acc = [(0, op.stage), (1, op.sub)], (op.stage, op.sub)
            vals = [w.regs.get(r, GARBAGE) for r in regs]
            if GARBAGE in vals:
                fail(f"{op.where}: MMA reads a torn/stale/unloaded fragment {vals}")
            if len(set(vals)) != 1:
                fail(f"{op.where}: MMA mixes K steps {vals}")
            w.acc.setdefault(acc, []).append(vals[0])
        elif op.kind == "barrier":
            w.at_barrier = True
            w.barriers += 1
            if all(x.at_barrier and x.barriers == w.barriers for x in warps):
                for x in warps:
                    x.at_barrier = False

    def completable(wi, c):
        q = warps[wi].queues[c]
        if not q:
            return False
        kind, op, _, _, _, earlier = q[0]
        return not (earlier and earlier & inflight.get((op.ch, op.stage, op.sub), set()))

    while True:
        moves = [wi for wi in range(len(warps)) if enabled(wi)]
        comps = [(wi, c) for wi in range(len(warps)) for c in ("vm", "lgkm") if completable(wi, c)]
        if not moves and not comps:
            break
        weights = [speed[wi] for wi in moves] + [rates[wi][c] for wi, c in comps]
        if not moves:
            weights = [rates[wi][c] for wi, c in comps]
            wi, c = comps[rng.choices(range(len(comps)), weights)[0]]
            try:
                complete(wi, c)
            except Failure as f:
                return str(f)
            continue
        pick = rng.choices(range(len(weights)), weights)[0]
        try:
            if pick < len(moves):
                step(moves[pick])
            else:
                wi, c = comps[pick - len(moves)]
                complete(wi, c)
        except Failure as f:
            return str(f)
    for wi, w in enumerate(warps):
        if w.pc < len(w.prog) or w.at_barrier:
            return f"warp {wi} hangs at {w.prog[min(w.pc, len(w.prog) - 1)].where}"
    if single:
        tiles = sum(1 for o in warps[0].prog if o.kind == "load" and o.ch == 0)
        expected = [(t, s) for t in range(tiles) for s in slices]
    else:
        expected = [(t, 0) for t in range(2 * (iterations + 1))]
    mmas = {((0, 0) if single else (o.stage, o.sub)) for o in warps[0].prog if o.kind == "mma"}
    for wi, w in enumerate(warps):
        for acc in sorted(mmas):
            if w.acc.get(acc, []) != expected:
                return f"warp {wi}: accumulator {acc} received {w.acc.get(acc)} instead of {expected}"
    return None


def find_witness(doc, iterations=2, trials=200, seed=0, warps_per_group=1, lds_in_order=True):
    """The first failing trial's description, or None if every trial computed correctly."""
    rng = random.Random(seed)
    for _ in range(trials):
        bad = trial(doc, iterations, rng, warps_per_group, lds_in_order)
        if bad:
            return bad
    return None

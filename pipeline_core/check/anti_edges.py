"""Judge the reference's coarse ANTI edges that the emitted order violates.

The reference's LDS-ANTI rule matches channel and stage but not subtile, so an
IDENTITY order "violates" some same-iteration (distance 0) ANTI edges
(docs/guide/reference-behaviours.md, "Coarse ANTI edges").
For each such edge we decide, at subtile
granularity and from the checker's own data flow, whether the reordering is a
real hazard.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.check.hazards import analyse
from pipeline_core.check.program import CheckProgram, Instr, Kind
from pipeline_core.check.trace import expand
from pipeline_core.check.verdict import AntiEdgeFinding, HazardKind

MATCH_KEYS = ("tag", "stage", "subtile", "k_offset", "channel")
ANTI = 1


def _key(op: Mapping[str, Any]) -> tuple:
    return tuple(op.get(k) for k in MATCH_KEYS)


def _kernel_positions(document: Mapping[str, Any]) -> dict[int, int]:
    """body index -> kernel entry index (k-th identical op <-> k-th identical entry)."""
    body = document.get("body") or []
    kernel = [e.get("op", {}) for e in document.get("kernel") or [] if isinstance(e, Mapping)]
    slots: dict[tuple, list[int]] = {}
    for i, op in enumerate(kernel):
        slots.setdefault(_key(op), []).append(i)
    used: dict[tuple, int] = {}
    out = {}
    for b, op in enumerate(body):
        if not isinstance(op, Mapping):
            continue
        k = _key(op)
        n = used.get(k, 0)
        if n < len(slots.get(k, [])):
            out[b] = slots[k][n]
        used[k] = n + 1
    return out


def _touches(ins: Instr) -> tuple[str, set]:
    """What an op reads or writes, at subtile granularity."""
    if ins.kind is Kind.FRAG:
        return "reads", {("lds", ins.channel, ins.stage, ins.subtile), ("reg", ins.channel, ins.subtile)}
    if ins.kind is Kind.LOAD:
        return "writes", {("lds", ins.channel, ins.stage, ins.subtile)}
    if ins.kind is Kind.MMA:
        return "reads", {("reg",) + r for r in ins.operands}
    return "touches", set()


def _name(keys: set) -> str:
    return ", ".join(f"LDS ch{k[1]} s{k[2]} sub{k[3]}" if k[0] == "lds" else f"register ch{k[1]}#{k[2]}"
                     for k in sorted(keys))


def classify_anti_edges(document: Mapping[str, Any] | None, program: CheckProgram,
                        iterations: int) -> tuple[AntiEdgeFinding, ...]:
    if not isinstance(document, Mapping) or not isinstance(document.get("edges"), list) \
            or program.single_buffer:
        return ()
    where = _kernel_positions(document)
    findings = []
    traces = None
    analysis = None
    for n, e in enumerate(document["edges"]):
        if not isinstance(e, Mapping) or e.get("kind_value", e.get("kind")) not in (ANTI, "ANTI") \
                or e.get("distance", 0) != 0:
            continue
        p, c = e.get("producer"), e.get("consumer")
        if p not in where or c not in where or where[c] > where[p]:
            continue
        pi, ci = program.kernel[where[p]], program.kernel[where[c]]
        _, pk = _touches(pi)
        _, ck = _touches(ci)
        pk_lds = {k for k in pk if k[0] == "lds"} if ci.kind is Kind.LOAD else pk
        ck_set = ck if ci.kind is Kind.LOAD else {k for k in ck if k[0] == "reg"}
        common = pk_lds & ck_set
        index = e.get("index", n)
        pdesc, cdesc = f"{pi.describe()} (kernel[{pi.index}])", f"{ci.describe()} (kernel[{ci.index}])"
        if not common:
            findings.append(AntiEdgeFinding(index, p, c, pdesc, cdesc, False,
                                            f"disjoint at subtile granularity: the producer reads "
                                            f"{_name(pk_lds)}, the consumer writes {_name(ck_set)}"))
            continue
        if traces is None or analysis is None:  # built together, on first need
            traces = expand(program, max(iterations, 2), 1)
            analysis = analyse(program, traces)
        t = traces[0]
        it = 2 if iterations >= 2 else 1
        pos = {ev.instr.index: q for q, ev in enumerate(t.events)
               if ev.instr.phase == "kernel" and ev.iteration == it}
        rp, wp = pos[pi.index], pos[ci.index]
        pair = {pi.index, ci.index}
        flagged = [v for v in analysis.violations
                   if v.kind in (HazardKind.LDS_WAR, HazardKind.LDS_RAW, HazardKind.REG_WAR)
                   and v.other is not None and v.site.phase == v.other.phase == "kernel"
                   and {v.site.index, v.other.index} == pair]
        if flagged:
            findings.append(AntiEdgeFinding(index, p, c, pdesc, cdesc, True,
                                            f"{flagged[0].kind.value}: {flagged[0].message}"))
            continue
        if ci.kind is Kind.LOAD and pi.kind is Kind.FRAG:
            got = analysis.reads.get((0, rp), (None,))[0]
            tile = t.events[wp].k_base + (ci.k_shift or 0)
            if got == tile:
                reason = (f"same buffer {_name(common)}, but the read consumes this very load "
                          f"(tile k+{tile - t.events[wp].k_base:d} of the same iteration): a FLOW "
                          "dependence; the WAR it must respect is with the previous iteration's read, "
                          "which the checker proves protected")
            else:
                reason = (f"same buffer {_name(common)}; the read gets tile {got} and the load "
                          f"writes tile {tile}; the checker proves the overwrite ordered after the read")
        else:
            reason = f"same {_name(common)}; the checker proves the accesses ordered"
        findings.append(AntiEdgeFinding(index, p, c, pdesc, cdesc, False, reason))
    return tuple(findings)

"""Every single edit of eleven agents plans, each asked of the prover, each accepted one judged
again over longer unrolls (pipeline_core/check/plan_edits.py; issue 33's audit).

For each variant: the edits (:func:`~pipeline_core.check.plan_edits.plan_edits`), how many the
prover refused (an UNSAFE verdict, or one clear ``PipelineError`` line), accepted, or answered
with an exception (a crash: the count must be 0); of the accepted, how many the oracle (the
same plan proven with ``longer=True``) finds unsafe (must be 0), and the accepted edits grouped
by what they changed, for the reader to judge why they are harmless.  Needs no GPU.

    python benchmarks/plan_edit_audit.py [--variant NAME] [--limit N] [--stride N] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import traceback

#: label -> (schedule, -p, -T): the audit's eleven plans
VARIANTS = {
    "gemm": ("warpspecialized-gemm", {}, {}),
    "gemm pingpong": ("warpspecialized-gemm", {"pingpong": "true", "BN": "128"}, {}),
    "gemm tma store": ("warpspecialized-gemm", {"store": "tma"}, {}),
    "gemm split-k": ("warpspecialized-gemm", {"split_k": "true"}, {}),
    "gemm cluster": ("warpspecialized-gemm", {"cluster": "2"}, {}),
    "gemm 1 consumer": ("warpspecialized-gemm", {"consumers": "1", "BM": "64"}, {}),
    "gemm lag 2 x 4 stages": ("warpspecialized-gemm", {"release_lag": "2"}, {"stages": "4"}),
    "attention": ("flash-attention-fwd", {}, {}),
    "attention causal": ("flash-attention-fwd", {"causal": "true"}, {}),
    "attention q_stages 2": ("flash-attention-fwd", {"q_stages": "2"}, {"stages": "2"}),
    "attention 1 consumer": ("flash-attention-fwd", {"consumers": "1", "pingpong": "false",
                                                 "block_m": "64"}, {}),
}


def compiled(label: str):
    from pipeline_core.api import compile_named
    from pipeline_core.plugins import default_host

    schedule, params, targs = VARIANTS[label]
    return compile_named(schedule, target="h100", host=default_host(), params=params,
                         target_args=targs)


def emitter(label: str):
    """The emitter that writes the variant's kernel (its family's)."""
    if VARIANTS[label][0] == "flash-attention-fwd":
        from pipeline_core_schedules_attention.emit_attention import emit_attention
        return emit_attention
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma
    return emit_wgmma


def kernel_of(emit, c, plan) -> str | None:
    """The kernel ``emit`` writes from ``plan`` (None: the emitter refuses it)."""
    import attrs

    from pipeline_core.errors import PipelineError
    try:
        return emit(attrs.evolve(c, plan=plan))
    except PipelineError:
        return None


def ask(c, plan, *, longer: bool = False):
    """The prover's answer on ``plan``: ("refused" | "accepted", verdict or message) or
    ("crash", traceback)."""
    from pipeline_core.agents.prove import prove_plan
    from pipeline_core.errors import PipelineError

    try:
        v = prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names, longer=longer)
    except PipelineError as e:
        text = str(e)
        return ("refused" if "\n" not in text.strip() else "crash"), text
    except Exception:  # noqa: BLE001 - what the audit counts
        return "crash", traceback.format_exc(limit=4)
    return ("accepted" if v.safe else "refused"), v


def audit(label: str, limit: int | None = None, stride: int = 1, oracle: bool = True,
          sample: int | None = None) -> dict:
    """The audit of one variant: every ``stride``-th edit up to ``limit``, or ``sample`` edits
    spread evenly over all of them; ``oracle``: judge each accepted edit over longer unrolls."""
    from pipeline_core.check.plan_edits import plan_edits

    c = compiled(label)
    emit = emitter(label)
    source = emit(c)
    counts: collections.Counter[str] = collections.Counter()
    harmless: collections.Counter[str] = collections.Counter()
    #: accepted edits by what the emitter makes of them: the same kernel byte for byte (the
    #: edit is of a field the emitter does not read), another kernel, or a refusal
    kernels: collections.Counter[str] = collections.Counter()
    crashes, oracle_unsafe = [], []
    edits = list(plan_edits(c.plan))
    if sample is not None:
        stride, limit = max(1, len(edits) // sample), sample
    for n, edit in enumerate(edits[::stride]):
        if limit is not None and n >= limit:
            break
        try:
            plan = edit.apply(c.plan)
        except Exception:  # noqa: BLE001 - the record refuses the value itself
            counts["refused by the record"] += 1
            continue
        answer, detail = ask(c, plan)
        counts[answer] += 1
        if answer == "crash":
            crashes.append((edit.description, detail))
        elif answer == "accepted" and oracle:
            again, verdict = ask(c, plan, longer=True)
            if again != "accepted":
                oracle_unsafe.append((edit.description, str(getattr(verdict, "violations",
                                                                    verdict))[:300]))
            else:
                kernel = kernel_of(emit, c, plan)
                verdict = ("emitter refuses" if kernel is None else "same kernel"
                           if kernel == source else "another kernel")
                kernels[verdict] += 1
                if verdict == "another kernel":  # these are the ones that need a reason
                    harmless[re.sub(r"\[\d+\]|\d+", "#", edit.description)] += 1
    return {"variant": label, "edits": sum(counts.values()), **counts,
            "crashes": crashes, "oracle_unsafe": oracle_unsafe,
            "accepted_kernels": dict(kernels), "changed_kernel_edits": dict(harmless.most_common())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--limit", type=int, default=None, help="edits per variant (all)")
    ap.add_argument("--stride", type=int, default=1, help="every Nth edit (1: all)")
    ap.add_argument("--json", help="write the results here as JSON lines")
    args = ap.parse_args(argv)
    bad = 0
    for label in args.variant or list(VARIANTS):
        r = audit(label, args.limit, args.stride)
        bad += len(r["crashes"]) + len(r["oracle_unsafe"])
        print(f"{label}: {r['edits']} edits, {r.get('refused', 0)} refused, "
              f"{r.get('refused by the record', 0)} refused by the record, "
              f"{r.get('accepted', 0)} accepted, {len(r['crashes'])} crashes, "
              f"{len(r['oracle_unsafe'])} accepted but unsafe over longer unrolls; accepted: "
              f"{r['accepted_kernels']}", flush=True)
        for what, detail in r["crashes"][:5] + r["oracle_unsafe"][:5]:
            print(f"  {what}: {detail.strip().splitlines()[-1] if detail else ''}")
        if args.json:
            with open(args.json, "a", encoding="utf-8") as f:
                f.write(json.dumps(r) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

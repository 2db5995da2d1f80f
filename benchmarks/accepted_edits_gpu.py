"""The GPU's word on fence edits of flash-attention-fwd (issue 33): the one the prover accepts
(each consumer's fence before PV dropped: the fence before S, with no register access since,
already orders the softmax's P and the rescaled O before the PV group) and the one it refuses
(every fence but the prologue's dropped), each emitted and run beside the unedited kernel
through the call's path on fresh random inputs against the fp32 reference; the accepted one
also under compute-sanitizer racecheck and synccheck.

    python3 benchmarks/accepted_edits_gpu.py [--out DIR]          # on the GPU machine

One JSON line per result on stdout and in DIR/accepted_edits.jsonl.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import attention_checks as ac  # noqa: E402

#: (head dim, causal) the kernels are made for, and the shapes each runs: (B, Hq, Hkv, Sq, Sk)
CASES = {(64, False): ((2, 8, 8, 2048, 2048), (1, 2, 2, 100, 77), (1, 4, 2, 1000, 3000)),
         (128, False): ((2, 8, 8, 2048, 2048), (1, 4, 2, 1000, 3000)),
         (64, "top_left"): ((2, 8, 8, 2048, 2048), (1, 2, 2, 200, 200)),
         (128, "top_left"): ((2, 8, 8, 2048, 2048),)}
ROUNDS = 3


def edited(c, which: str):
    """``c`` with the fence edit ``which`` made in every consumer ("control": none), and the
    prover's verdict on it."""
    import attrs

    from pipeline_core.agents.prove import prove_plan
    from pipeline_core.plan import StepKind

    from pipeline_core_schedules_attention import AttentionTag

    def keep(steps, section):
        out = []
        for i, s in enumerate(steps):
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            before_pv = (nxt is not None and nxt.kind == StepKind.OP
                         and c.body[nxt.op].tag == AttentionTag.WGMMA_PV)
            if s.kind == StepKind.FENCE and (which == "no-fences-after-prologue" or (
                    which == "no-pv-fence" and section == "kernel" and before_pv)):
                continue
            out.append(s)
        return tuple(out)

    programs = [attrs.evolve(p, kernel=keep(p.kernel, "kernel"),
                             epilogue=tuple(keep(it, "epilogue") for it in p.epilogue))
                if p.name.startswith("consumer") and which != "control" else p
                for p in c.plan.programs]
    plan = attrs.evolve(c.plan, programs=programs)
    verdict = prove_plan(plan, c.body, c.edges, plan.sync, names=c.tag_names)
    return attrs.evolve(c, plan=plan), verdict


def kernels(d: int, causal) -> dict:
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    base = ac.compiled_variant(d, True, True, causal)
    out = {}
    for which in ("control", "no-pv-fence", "no-fences-after-prologue"):
        c, verdict = edited(base, which)
        out[which] = (c, emit_attention(c), verdict.safe)
    return out


def run(out: Path | None, sanitize: bool) -> None:
    import torch

    torch.manual_seed(0)
    lines = []

    def say(record: dict) -> None:
        lines.append(record)
        print(json.dumps(record), flush=True)

    say({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    for (d, causal), shapes in CASES.items():
        ks = kernels(d, causal)
        labels = {w: (c, src) for w, (c, src, _) in ks.items()}
        for shape in shapes:
            errs: dict[str, list[float]] = {w: [] for w in ks}
            for r in range(ROUNDS):  # each round fresh inputs, the edits in rotated order
                order = list(ks)[r % len(ks):] + list(ks)[:r % len(ks)]
                for w in order:
                    errs[w].append(ac._run_kernel(torch, w, labels, *shape, d, causal))
            for w, (_, _, safe) in ks.items():
                say({"kind": "edit-run", "D": d, "causal": causal, "shape": list(shape),
                     "edit": w, "proof": "SAFE" if safe else "UNSAFE", "errs": errs[w],
                     "control_errs": errs["control"]})
    if out is not None:
        with open(out / "accepted_edits.jsonl", "a") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
    if sanitize:
        for tool in ("racecheck", "synccheck"):
            p = subprocess.run([ac._sanitizer(), "--tool", tool, "--kernel-name",
                                "kns=pc_flash_attention_fwd", sys.executable, __file__,
                                "--sanitize-run"], capture_output=True, text=True, timeout=500)
            text = p.stdout + p.stderr
            summary = sorted({x for x in text.splitlines()
                              if "SUMMARY" in x or "hazard" in x.lower()})
            record = {"kind": "sanitizer", "tool": tool, "edit": "no-pv-fence", "rc":
                      p.returncode, "summary": summary[:6],
                      "runs": text.count('"kind": "sanitized-run"')}
            say(record)
            if out is not None:
                with open(out / "accepted_edits.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")


def sanitize_run() -> None:
    """Under the sanitizer: the accepted edit at small shapes with tails, both head dims."""
    import torch

    for (d, causal), shapes in CASES.items():
        ks = kernels(d, causal)
        labels = {w: (c, src) for w, (c, src, _) in ks.items()}
        for shape in ((1, 2, 2, 100, 77), (1, 2, 2, 200, 200)):
            err = ac._run_kernel(torch, "no-pv-fence", labels, *shape, d, causal)
            print(json.dumps({"kind": "sanitized-run", "D": d, "causal": causal,
                              "shape": list(shape), "err": err}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--no-sanitize", action="store_true")
    ap.add_argument("--sanitize-run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sanitize_run:
        return sanitize_run()
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    run(out, not args.no_sanitize)


if __name__ == "__main__":
    main()

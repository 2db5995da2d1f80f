"""Issue 27's done-when checks of ``attention()`` on the GPU (docs/guide/attention.md,
"GPU checks").

  python3 benchmarks/attention_checks.py [--phase all|build|correct|graph] [--out DIR] [--cases N]

``all`` runs, in one process and the subprocesses it starts:

1. **build**: every kernel below emitted and built with nvcc into the disk cache
   (``PIPELINE_CORE_CACHE_DIR``), in parallel, so the subprocesses only load them.  Each mutant
   is first compiled as ``compile`` would: the refusal (the proof's first hazard) is recorded.
2. **correct**: ``--cases`` random configurations (S in {1, 17, 128, 1000, 4096}, query length
   mostly different from key length, causal off, top-left or bottom-right, grouped-query heads,
   D 64 / 128, bf16 / fp16), fresh random inputs, the output NaN-poisoned, against an fp32
   reference (a query row that sees no key: 0).  Per case the max abs error of ours and of the
   peer (``sdpa-flash``; where flash refuses the case, the next of cuDNN, efficient, math, named
   in the record) against the same reference, and their ratio; a case passes when ours is at
   most 1.5x the peer's.
3. **graph**: CUDA-graph capture and replay on new inputs, and ``torch.compile(fullgraph=True)``,
   each checked bit for bit against the eager call.
4. **sanitize**: compute-sanitizer racecheck and synccheck, one process per (tool, head dim),
   each running every variant (intra_overlap x pingpong) at a shape with tails, a causal one and
   a bottom-right grouped-query one through the call's path.
5. **mutants**: the issue's four mutations (:data:`MUTATIONS`), emitted with ``--allow-unsafe``
   and ``-O watchdog`` (:data:`WATCHDOG` polls), each run in its own process beside the same
   kernel unmutated under the same watchdog: trapped (the launch fails), hung (killed), wrong
   (error over 10x the control's, or NaN), or ran correct.

Every result is one JSON line on stdout and in ``--out``/checks.jsonl; logs beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

SEQS = (1, 17, 128, 1000, 4096)
CAUSAL = (False, "top_left", "bottom_right")
#: the overlaps of the schedule, each on or off: the variants the sanitizers run
VARIANTS = [(io, pp) for io in (True, False) for pp in (True, False)]
#: the issue's mutations: (category of pipeline_core.check.mutate, which of the mutations of the
#: plan, every consumer (identical consumers share one emitted program) or the first only)
MUTATIONS = {
    "drop-v-release": ("drop_arrive", "kernel v_empty", True),
    "loosen-s-wait": ("loosen_counter_wait", "kernel wait before SOFTMAX", True),
    "flip-k-parity": ("flip_phase_offset", "kernel k_full +1", True),
    "drop-named-arrive": ("drop_named_arrive", "consumer0 kernel", False),
}
#: the variants the mutants are made of: D=64, ping-pong on (it has the named barriers), the
#: intra-warpgroup overlap on and off
MUTANT_VARIANTS = (True, False)
#: polls of one mbarrier wait before the kernel traps (-O watchdog)
WATCHDOG = 1 << 20
MUTANT_SHAPE = (2, 4, 512, 2048)  # B, H, Sq, Sk: 16 KV blocks a tile, past the 2 stages
#: the head dims these checks build, sanitize and run (issue 27's); D 96, 192 and 256 are
#: checked, sanitized and timed by attention_headdims.py
CHECKED_DIMS = (64, 128)
LINES: list[dict] = []


def emit(record: dict, out: Path | None = None) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)
    if out is not None:
        with open(out / "checks.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def host():
    from pipeline_core_schedules_attention.call import CALL
    return CALL.host()


def compiled_variant(head_dim: int, intra: bool, pingpong: bool, causal: bool | str = False,
                     short: bool = False):
    """The schedule as the call compiles it (its long- or short-sequence tile), with the
    overlaps given."""
    from pipeline_core.plugin_api import compile_named

    from pipeline_core_schedules_attention.call import CAUSAL_ALIGN, call_params, call_stages
    align = CAUSAL_ALIGN[causal]
    params = {**call_params(head_dim, align is not None, align or "top_left", short),
              "intra_overlap": str(intra).lower(), "pingpong": str(pingpong).lower()}
    stages = call_stages(head_dim, align is not None, short)
    return compile_named("flash-attention-fwd", target="h100", params=params,
                         target_args={"stages": str(stages)}, host=host())


def _before_softmax(c, m) -> bool:
    """Whether mutation ``m`` edits the wait right before its consumer's softmax."""
    from pipeline_core.plan import StepKind

    from pipeline_core_schedules_attention import AttentionTag
    steps = c.plan.program(m.agent).kernel
    nxt = next((s for s in steps[m.index + 1:] if s.kind == StepKind.OP), None)
    return nxt is not None and c.body[nxt.op].tag == AttentionTag.SOFTMAX


def _picked(c, name: str) -> list:
    from pipeline_core.check.mutate import agent_mutations

    category, _, every = MUTATIONS[name]
    pick = {"drop-v-release": lambda m: m.ring == "v_empty" and m.section == "kernel",
            "loosen-s-wait": lambda m: m.section == "kernel" and _before_softmax(c, m),
            "flip-k-parity": lambda m: (m.ring == "k_full" and m.section == "kernel"
                                        and m.delta == 1),
            "drop-named-arrive": lambda m: m.agent == "consumer0" and m.section == "kernel"}[name]
    picked = [m for m in agent_mutations(c.plan, (category,)) if pick(m)]
    if not picked:
        raise SystemExit(f"attention_checks: mutation {name}: none of {category} picked")
    return picked if every else picked[:1]


def mutant(name: str, intra: bool):
    """(the mutated compile, forced with --allow-unsafe; the refusal compile gives it: the
    proof's first hazard kind and its text)."""
    from pipeline_core.check.mutate import mutate_compiled
    from pipeline_core.proof import UnsafeScheduleError

    c = compiled_variant(64, intra, True)
    picked = _picked(c, name)
    try:
        mutate_compiled(c, picked[0], host=host())
        refusal = ("SAFE", "the proof accepted the mutation")
    except UnsafeScheduleError as exc:
        first = exc.verdict.first if exc.verdict is not None else None
        refusal = (first.kind.value if first is not None else "UNPROVEN", str(exc).splitlines()[0])
    for m in picked:
        c = mutate_compiled(c, m, allow_unsafe=True, host=host())
    return c, refusal


def _makers() -> dict:
    """label -> a function making (compiled, source) for every kernel the checks run: ``call-``
    the call's own (``call._source``), ``variant-`` each overlap on or off, ``mutant-`` the
    mutants and their control, under the watchdog."""
    from pipeline_core_schedules_attention.call import CAUSAL_ALIGN, _source
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    def variant(d, io, pp, causal, short):
        c = compiled_variant(d, io, pp, causal, short)
        return c, emit_attention(c)

    def mutated(name, io):
        m = mutant(name, io)[0] if name != "control" else compiled_variant(64, io, True)
        return m, emit_attention(m, watchdog=WATCHDOG)

    make = {}
    for d in CHECKED_DIMS:
        for dtype in ("bf16", "fp16"):
            for causal in CAUSAL:
                for short in tiles(d, causal):
                    a = CAUSAL_ALIGN[causal]
                    make[f"call-{d}-{dtype}-{causal}-{TILES[short]}"] = (
                        lambda d=d, dtype=dtype, a=a, short=short: _source(
                            d, dtype, a is not None, a or "top_left", short))
        for io, pp in VARIANTS:
            for causal in CAUSAL:
                for short in tiles(d, causal):
                    make[variant_label(d, io, pp, causal, short)] = (
                        lambda d=d, io=io, pp=pp, causal=causal, short=short: variant(
                            d, io, pp, causal, short))
    for io in MUTANT_VARIANTS:
        for name in ("control", *MUTATIONS):
            make[mutant_label(name, io)] = lambda name=name, io=io: mutated(name, io)
    return make


def kernels_labels() -> list[str]:
    return list(_makers())


def kernels(prefix: str = "", exact: bool = False) -> dict[str, tuple]:
    """The kernels whose label starts with (``exact``: is) ``prefix``: label -> (compiled,
    source)."""
    return {label: f() for label, f in _makers().items()
            if (label == prefix if exact else label.startswith(prefix))}


#: the call's tiles by name (call.SHORT_TILES: few keys)
TILES = {False: "long", True: "short"}


def tiles(d: int, causal: bool | str) -> tuple[bool, ...]:
    """The call's tiles at head dim ``d``, causal or not (short: True), the short one where it
    differs (call.SHORT_TILES)."""
    from pipeline_core_schedules_attention.call import SHORT_TILES
    return (False, True) if (d, causal is not False) in SHORT_TILES else (False,)


def variant_label(d: int, io: bool, pp: bool, causal: bool | str, short: bool = False) -> str:
    return f"variant-{d}-{TILES[short]}-intra{int(io)}-pp{int(pp)}-{causal}"


def mutant_label(name: str, io: bool) -> str:
    return f"mutant-{name}-intra{int(io)}"


def build(out: Path | None, jobs: int) -> None:
    """Every kernel into the disk cache, compiled and built in parallel; each mutant's
    refusal recorded."""
    with ProcessPoolExecutor(jobs) as pool:
        for (name, io), (kind, text) in zip(
                [(n, io) for io in MUTANT_VARIANTS for n in MUTATIONS],
                pool.map(_refusal, [(n, io) for io in MUTANT_VARIANTS for n in MUTATIONS])):
            emit({"kind": "mutant-refusal", "mutant": name, "intra_overlap": io,
                  "hazard": kind, "refusal": text}, out)
        labels = list(kernels_labels())
        built = list(pool.map(_build_one, labels))
    emit({"kind": "build", "kernels": len(labels), "built": sum(built)}, out)


def _refusal(job: tuple[str, bool]) -> tuple[str, str]:
    return mutant(*job)[1]


def _build_one(label: str) -> bool:
    """One kernel emitted and built into the disk cache (a build-pool worker)."""
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.runtime import ARCH

    from pipeline_core_schedules_attention.call import BUILD_OPTIONS
    from pipeline_core_schedules_attention.emit_attention import KERNEL_NAME

    (_, src), = kernels(label, exact=True).values()
    return cubin_path(src, KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None


# ---- on the GPU -----------------------------------------------------------------------------

def reference(torch, q, k, v, scale, causal):
    """fp32 softmax(q.k^T * scale).v, K and V heads repeated per group (torch's enable_gqa);
    the mask top-left (row r keeps keys <= r) or bottom-right (<= r + Sk - Sq); a row with no
    key gives 0 (FlashAttention's output for it, the kernel's guard)."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    s = (q.float() @ kf.transpose(-1, -2)) * scale
    keep = None
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        off = sk - sq if causal == "bottom_right" else 0
        r = torch.arange(sq, device=s.device)[:, None]
        keep = torch.arange(sk, device=s.device)[None, :] <= r + off
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = torch.nan_to_num(p, nan=0.0)  # rows with no key: softmax of all -inf
    return p @ vf, (None if keep is None else ~keep.any(dim=-1))


def sdpa_readable(t):
    """``t`` as a peer is given it: itself, or a dense copy (the same values) where a stride
    is off 16 bytes.  torch's SDPA kernels take such a view and fault on the H200 ("CUDA
    error: misaligned address", which poisons the process); the peer's error, the bound, is
    a property of the values, not of where they lie."""
    elem = t.element_size()
    if t.stride(-1) == 1 and all(s * elem % 16 == 0 for s in t.stride()[:-1]):
        return t
    return t.contiguous()


def peer(torch, q, k, v, causal):
    """(name, output) of the first SDPA backend that takes the case: flash, cuDNN, efficient,
    math (bottom-right through torch's causal_lower_right bias; grouped-query via enable_gqa),
    on :func:`sdpa_readable` operands."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = sdpa_readable(q), sdpa_readable(k), sdpa_readable(v)
    kw = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
    for name, be in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                     ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION),
                     ("sdpa-math", SDPBackend.MATH)):
        try:
            with sdpa_kernel([be]):
                if causal == "bottom_right":
                    o = F.scaled_dot_product_attention(
                        q, k, v, attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]), **kw)
                else:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), **kw)
            torch.cuda.synchronize()
            return name, o
        except Exception:  # noqa: BLE001 - this backend refuses the case (any error): the next
            continue
    return None, None


def max_err(torch, out, ref) -> float:
    return float((torch.nan_to_num(out.float(), nan=float("inf")) - ref).abs().max())


def configs(rng: random.Random, n: int) -> list[tuple]:
    """(B, Hq, Hkv, Sq, Sk, D, dtype, causal): every S and causal mode, then random ones; the
    query length differs from the key length in most."""
    out = [(1, 2, 1, 1000, 17, 64, "bf16", "bottom_right"),  # 983 rows see no key
           (1, 4, 2, 17, 4096, 128, "bf16", "bottom_right"),
           (2, 4, 4, 128, 1000, 64, "fp16", "top_left"),
           (1, 8, 2, 4096, 4096, 128, "bf16", False),
           (1, 2, 2, 1, 1, 128, "fp16", "bottom_right")]
    while len(out) < n:
        sq = rng.choice(SEQS)
        sk = rng.choice([s for s in SEQS if s != sq] if rng.random() < 0.85 else SEQS)
        hkv = rng.choice((1, 2, 4))
        hq = hkv * rng.choice((1, 2, 4))
        b = 1 if sq * sk >= 1000 * 4096 else rng.choice((1, 2))
        while b * hq * sq * sk > 4 * 4096 * 4096:
            hq, hkv = max(hq // 2, 1), max(hkv // 2, 1)
        out.append((b, hq, hkv, sq, sk, rng.choice((64, 128)), rng.choice(("bf16", "fp16")),
                    rng.choice(CAUSAL)))
    return out


def judge(torch, o, q, k, v, ref, empty, causal, slack: float = 0.0) -> dict:
    """The output ``o``'s error against ``ref`` over the rows that see a key, the first SDPA
    backend's on the same inputs (``peer``), whether ours is within 1.5x of it (plus
    ``slack``), and where rows see no key (``empty``), that ours are exactly 0 there."""
    pname, po = peer(torch, q, k, v, causal)
    keyed = None if empty is None or not bool(empty.any()) else ~empty
    rows = (lambda x: x) if keyed is None else (lambda x: x[:, :, keyed])
    err = max_err(torch, rows(o), rows(ref))
    perr = max_err(torch, rows(po), rows(ref)) if po is not None else None
    rec = {"err": err, "peer": pname, "peer_err": perr,
           "ratio": (err / perr if perr else None), "nan": bool(torch.isnan(o).any()),
           "ok": perr is not None and err <= 1.5 * perr + slack}
    if keyed is not None:
        rec["no_key_rows"] = int(empty.sum())
        rec["no_key_max_abs"] = max_err(torch, o[:, :, empty], torch.zeros_like(
            ref[:, :, empty]))
        rec["ok"] = rec["ok"] and rec["no_key_max_abs"] == 0.0
        if po is not None:
            rec["peer_no_key_nan"] = bool(torch.isnan(po[:, :, empty]).any())
    return rec


def check_case(torch, case: tuple, slack: float = 0.0) -> dict:
    """One case (B, Hq, Hkv, Sq, Sk, D, dtype, causal): fresh inputs, the call's output
    NaN-poisoned, :func:`judge`'s record (``slack``: its)."""
    from pipeline_core_schedules_attention.call import attention

    b, hq, hkv, sq, sk, d, dtype, causal = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    ref, empty = reference(torch, q, k, v, d ** -0.5, causal)
    poison = torch.full_like(q, float("nan"))
    del poison  # the call's output reuses this freed NaN block
    o = attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    return {"kind": "correct", "B": b, "Hq": hq, "Hkv": hkv, "Sq": sq, "Sk": sk, "D": d,
            "dtype": dtype, "causal": causal,
            **judge(torch, o, q, k, v, ref, empty, causal, slack)}


def correct(torch, n: int, seed: int, out: Path | None) -> None:
    from pipeline_core_schedules_attention.call import attention

    rng = random.Random(seed)
    done = []
    for case in configs(rng, n):
        rec = check_case(torch, case)
        emit(rec, out)
        done.append(rec)
    emit({"kind": "correct-summary", "cases": len(done),
          "failed": sum(not r["ok"] for r in done),
          "differ": sum(r["Sq"] != r["Sk"] for r in done),
          "gqa": sum(r["Hq"] != r["Hkv"] for r in done),
          "bottom_right": sum(r["causal"] == "bottom_right" for r in done),
          "max_err": max(r["err"] for r in done),
          "max_ratio": max(r["ratio"] or 0 for r in done),
          "peers": sorted({str(r["peer"]) for r in done})}, out)
    # what torch's SDPA (math) gives a row with no key under an explicit mask
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(1, 1, 4, 64, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(8, 4, dtype=torch.bool, device="cuda").tril(diagonal=4 - 8)
    with sdpa_kernel([SDPBackend.MATH]):
        m = F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask)
    ours = attention(q, kv, kv, causal="bottom_right")
    emit({"kind": "no-key-rows", "rows": 4, "torch_math_explicit_mask":
          ("nan" if bool(torch.isnan(m[0, 0, :4]).any()) else
           f"max_abs {float(m[0, 0, :4].float().abs().max())}"),
          "ours_max_abs": float(ours[0, 0, :4].float().abs().max()), "torch": torch.__version__},
         out)


def graph(torch, out: Path | None) -> None:
    from pipeline_core_schedules_attention.call import attention

    q = torch.randn(2, 4, 1000, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 300, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 2, 300, 128, device="cuda", dtype=torch.bfloat16)
    attention(q, k, v, causal="bottom_right")  # warm: the kernel and tensor maps built
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            o = attention(q, k, v, causal="bottom_right")
    torch.cuda.current_stream().wait_stream(s)
    same, errs = [], []
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t, dtype=torch.float32))
        o.fill_(float("nan"))
        g.replay()
        eager = attention(q, k, v, causal="bottom_right")
        torch.cuda.synchronize()
        same.append(bool(torch.equal(o, eager)))
        errs.append(max_err(torch, o, reference(torch, q, k, v, 128 ** -0.5, "bottom_right")[0]))
    emit({"kind": "cuda-graph", "replays": 3, "identical_to_eager": same, "max_err": max(errs),
          "ok": all(same)}, out)

    def f(x, y, z):
        return attention(x, y, z, causal="bottom_right", scale=0.1) * 2.0

    def op(x, y, z):  # the custom op alone, without the Python wrapper
        return torch.ops.pipeline_core.attention(x, y, z, "bottom_right", 0.1, False)[0] * 2.0

    for name, fn in (("torch-compile", f), ("torch-compile-op", op)):
        try:
            got = torch.compile(fn, fullgraph=True)(q, k, v)
            torch.cuda.synchronize()
        except Exception as exc:  # recorded as it is
            emit({"kind": name, "ok": False, "error": str(exc)[-1500:]}, out)
            continue
        same = bool(torch.equal(got, f(q, k, v)))
        emit({"kind": name, "fullgraph": True, "identical_to_eager": same, "ok": same}, out)


def _run_kernel(torch, label: str, ks: dict, b: int, hq: int, hkv: int, sq: int, sk: int,
                d: int, causal: bool | str) -> float:
    """Run kernel ``label`` through the call's path (its slot in the call's kernels) on fresh
    inputs; its max abs error against the fp32 reference."""
    from pipeline_core_schedules_attention import call

    c, src = ks[label]
    dev = torch.cuda.current_device()
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16)
    # the slot the call looks up for these tensors (no gradient: the kernel key without LSE)
    slot = call._kernel_key(call.plan_attention(q, k, v, causal=causal), dev, lse=False)
    call.CALL.kernels[slot] = call._load(c, src, dev)
    o = call.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    return max_err(torch, o, reference(torch, q, k, v, d ** -0.5, causal)[0])


#: the sanitizers' shapes: (B, Hq, Hkv, Sq, Sk, causal): tails, causal with tails, bottom-right
#: grouped-query with rows that see no key
SANITIZE_SHAPES = ((1, 2, 2, 100, 77, False), (1, 2, 2, 200, 200, "top_left"),
                   (1, 4, 2, 200, 77, "bottom_right"))


def sanitize_target(torch, d: int) -> None:
    ks = kernels(f"variant-{d}-")
    for io, pp in VARIANTS:
        for b, hq, hkv, sq, sk, causal in SANITIZE_SHAPES:
            for short in tiles(d, causal):
                err = _run_kernel(torch, variant_label(d, io, pp, causal, short), ks, b, hq, hkv,
                                  sq, sk, d, causal)
                print(json.dumps({"kind": "sanitized-run", "D": d, "tile": TILES[short],
                                  "intra_overlap": io, "pingpong": pp,
                                  "shape": [b, hq, hkv, sq, sk], "causal": causal,
                                  "err": err}), flush=True)


def mutant_target(torch, label: str) -> None:
    ks = kernels(label, exact=True)
    b, h, sq, sk = MUTANT_SHAPE
    errs = [_run_kernel(torch, label, ks, b, h, h, sq, sk, 64, False) for _ in range(2)]
    print(json.dumps({"kind": "mutant-run", "label": label, "errs": errs}), flush=True)


def _sanitizer() -> str:
    return shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"


_LOG = threading.Lock()


def _job(key: tuple, cmd: list[str], timeout: float,
         out: Path | None) -> tuple[int | None, str, float]:
    """Run one subprocess; its output goes to out/jobs.log as soon as it ends."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:  # its output is bytes, whatever text= says
        rc, text = None, "".join(x.decode(errors="replace") if isinstance(x, bytes)
                                 else (x or "") for x in (exc.stdout, exc.stderr))
    secs = time.monotonic() - t0
    if out is not None:
        with _LOG, open(out / "jobs.log", "a") as f:
            f.write(f"==== {key} rc={rc} {secs:.0f}s\n{text[-20000:]}\n")
    return rc, text, secs


def background(out: Path | None, timeout: float) -> list:
    """The sanitizer and mutant processes, started now (their results: :func:`collect`)."""
    me = [sys.executable, str(Path(__file__).resolve())]
    jobs = []
    for tool in ("racecheck", "synccheck"):
        for d in CHECKED_DIMS:
            jobs.append((("sanitize", tool, d),
                         [_sanitizer(), "--tool", tool, "--kernel-name",
                          "kns=pc_flash_attention_fwd", *me, "--phase", "sanitize-run",
                          "--head-dim", str(d)]))
    for io in MUTANT_VARIANTS:
        for name in ("control", *MUTATIONS):
            jobs.append((("mutant", name, io),
                         [*me, "--phase", "mutant-run", "--label", mutant_label(name, io)]))
    pool = ThreadPoolExecutor(6)
    return [(key, pool.submit(_job, key, cmd, timeout, out)) for key, cmd in jobs]


_TRAP = re.compile(r"illegal instruction|launch failure|CUDA_ERROR|cudaError|CUDA error", re.I)


def collect(futures: list, out: Path | None) -> None:
    controls = {}
    results = [(key, f.result()) for key, f in futures]
    for key, (rc, text, secs) in results:
        if key[0] == "mutant" and key[1] == "control":
            m = re.search(r'"errs": \[([^\]]*)\]', text)
            controls[key[2]] = max(float(x) for x in m.group(1).split(",")) if m else None
    for key, (rc, text, secs) in results:
        if key[0] == "sanitize":
            _, tool, d = key
            summary = sorted(set(re.findall(r"(RACECHECK SUMMARY: .*|ERROR SUMMARY: .*)",
                                            text)))
            runs = [json.loads(x) for x in re.findall(r'^(\{"kind": "sanitized-run".*)$', text,
                                                       re.M)]
            emit({"kind": "sanitizer", "tool": tool, "D": d, "rc": rc,
                  "summary": summary, "kernel_runs": len(runs),
                  "max_err": max((r["err"] for r in runs), default=None),
                  "variants": sorted({(r["tile"], r["intra_overlap"], r["pingpong"])
                                      for r in runs}),
                  "seconds": round(secs)}, out)
        else:
            _, name, io = key
            m = re.search(r'"errs": \[([^\]]*)\]', text)
            errs = [float(x) for x in m.group(1).split(",")] if m else None
            control = controls.get(io)
            if rc is None:
                outcome = "hung (killed)"
            elif errs is None:
                lines = [x for x in text.splitlines() if _TRAP.search(x)][-1:]
                last = text.strip().splitlines()[-1:] or [f"rc {rc}"]
                outcome = (f"trapped: {lines[0][-160:]}" if lines
                           else f"failed (not a launch error): {last[0][-160:]}")
            elif control is not None and any(e != e or e > 10 * control for e in errs):
                outcome = "wrong result"
            else:
                outcome = "ran correct"
            emit({"kind": "mutant", "mutant": name, "intra_overlap": io, "D": 64,
                  "shape": list(MUTANT_SHAPE), "watchdog": WATCHDOG, "outcome": outcome,
                  "errs": errs, "control_err": control, "seconds": round(secs)}, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default="all",
                    choices=("all", "build", "correct", "graph", "sanitize-run", "mutant-run"))
    ap.add_argument("--out", default="")
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--label", default="")
    ap.add_argument("--timeout", type=float, default=100.0, help="per subprocess, seconds")
    args = ap.parse_args()
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if args.phase in ("all", "build"):
        build(out, args.jobs)
        if args.phase == "build":
            return
    import torch

    torch.manual_seed(args.seed)
    if args.phase == "sanitize-run":
        return sanitize_target(torch, args.head_dim)
    if args.phase == "mutant-run":
        return mutant_target(torch, args.label)
    futures = background(out, args.timeout) if args.phase == "all" else []
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__},
         out)
    if args.phase in ("all", "correct"):
        correct(torch, args.cases, args.seed, out)
    if args.phase in ("all", "graph"):
        graph(torch, out)
    if futures:
        collect(futures, out)


if __name__ == "__main__":
    main()

"""The attention call's tile, ring depth and Q buffers, variant against variant, on the GPU.

  python3 benchmarks/attention_tiles.py [--anchors FILE] [--out DIR] [--rounds 7]
                                        [--configs 64x1024,64x1024c,...] [--variants a,b,...]

Each variant is a set of ``flash-attention-fwd`` parameters (``-p``, and ``stages`` for ``-T``)
put over the call's own choice (``call.CALL_PARAMS``), or (``order``: "hg,snake") a causal tile
order in place of the call's (``call.ORDER``); ``call`` is the call's choice itself (at
S <= ``call.SHORT_KEYS`` its short-sequence tile).  Per config (``DxS``, a trailing ``c`` for
causal; B = 16384 / S, H = 2048 / D, bf16):

1. Correctness first (METHOD.md): each variant at the timed shape (where its fp32 reference fits
   the GPU: S <= 4096) and at a small one with tails (Sq 1000, Sk 777), fresh random inputs,
   the output NaN-poisoned, against an fp32 reference (benchmarks/attention_call.py's); a case
   passes when its error is at most 1.5x sdpa-flash's.
2. Timing against ``attention_peers()`` (sdpa-flash, sdpa-cudnn) and, where its wheels travelled
   (fa4_peer.py), FlashAttention-4's forward in this process: CUDA-event
   medians after warm-up, interleaved rounds with the order rotated (bench_timing), per-round
   ratios against each peer and against the call.

Every result is one JSON line on stdout (and in --out/attention_tiles.jsonl).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("attention_call_bench", HERE / "attention_call.py")
assert _spec is not None and _spec.loader is not None
ac = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ac)  # its sys.path set-up, reference and error

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)
import fa4_peer  # noqa: E402  (beside this script)
from pipeline_core_schedules_attention.tile_order import TileOrder  # noqa: E402

_C3 = {"block_m": "192", "consumers": "3", "consumer_registers": "160", "block_n": "128"}
_C2 = {"block_m": "128", "consumers": "2", "consumer_registers": "240", "block_n": "128"}
#: name -> parameters over the call's own (``stages``: the ring depth, -T)
VARIANTS: dict[str, dict[str, str]] = {
    "call": {},
    # the long-sequence tiles at D=64 (call.CALL_TILES), not causal and causal
    "long-c3": {**_C3, "q_stages": "1", "stages": "2"},
    "long-c2": {**_C2, "q_stages": "1", "stages": "2"},
    # one change at a time from the short tile at D=64 (2 consumers, Q double-buffered, 3 stages)
    "c2-q2": {**_C2, "q_stages": "2", "stages": "2"},
    "c2-st3": {**_C2, "q_stages": "1", "stages": "3"},
    "c3-q2-st3": {**_C3, "q_stages": "2", "stages": "3"},
    "st3": {"stages": "3"},
    "bn128-st3": {"block_n": "128", "stages": "3"},
    "bn128-q2": {"block_n": "128", "q_stages": "2", "stages": "2"},
    "bn176-q1": {"block_n": "176", "q_stages": "1", "stages": "2"},
    # causal tile orders in place of the call's choice (tile_order.choose): "hg,snake"
    "order8": {"order": "8,0"},
    "order2": {"order": "2,0"},
    "order16s": {"order": "16,1"},
    # the fewest heads in flight (the backward's tie-break since session 24)
    "order1s": {"order": "1,1"},
    "order2s": {"order": "2,1"},
    "order4": {"order": "4,0"},
    "order8s": {"order": "8,1"},
    # narrower KV blocks at D=64 S<=2048 causal (the short tile's): less of the diagonal
    # block masked, twice the iterations
    "bn64-st4": {"block_n": "64", "stages": "4"},
    "bn64-st6": {"block_n": "64", "stages": "6"},
    "bn96-st3": {"block_n": "96", "stages": "3"},
    "q2": {"q_stages": "2"},
    "q2-st3": {"q_stages": "2", "stages": "3"},
    # the consumers' turns over S_j and PV_{j-1} (FA3's and FA4's scheduler barrier), on the
    # call's tile and on 3 consumers of 64 rows (FA4's 192 x 128 at D=64, causal or not)
    "pp": {"pingpong": "true"},
    "c3-pp": {**_C3, "q_stages": "1", "stages": "2", "pingpong": "true"},
    # the long D=64 tile (3 consumers in turn) with a deeper ring or a second Q
    "c3-pp-st3": {**_C3, "q_stages": "1", "stages": "3", "pingpong": "true"},
    "c3-pp-st4": {**_C3, "q_stages": "1", "stages": "4", "pingpong": "true"},
    "c3-pp-q2": {**_C3, "q_stages": "2", "stages": "2", "pingpong": "true"},
    # the call's kernels as the kit emitted them before session 18 (issue_probe.py: a rewrite
    # of the emitted source, not parameters)
    "session-17-source": {"rewrite": "as_session_17"},
    # a probe (no O written; timed unchecked): what the O store costs
    "no-o-store": {"rewrite": "no_o_store", "probe": "1"},
    "o-store-4": {"rewrite": "o_store_4"},
    "o-store-8": {"rewrite": "o_store_8"},
}
#: the most attention scores the fp32 reference of a timed shape holds (64 heads of S = 4096;
#: the reference keeps several [B, H, S, S] fp32 tensors at once)
REFERENCE_SCORES = 64 * 4096 * 4096
LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def parse_config(text: str) -> tuple[int, int, bool]:
    causal = text.endswith("c")
    d, s = (int(x) for x in text.rstrip("c").split("x"))
    return d, s, causal


@contextlib.contextmanager
def variant(mod, name: str):
    """Variant ``name`` in place: its parameters over the call's (``call.CALL_PARAMS``) and its
    causal tile order (``order``: "hg,snake", ``call.ORDER``), the call's own restored after."""
    import pipeline_core_schedules_attention.emit_attention as emitter

    params = dict(VARIANTS[name])
    params.pop("probe", None)
    order = params.pop("order", None)
    rewrite = params.pop("rewrite", None)
    if order is not None:
        hg, snake = (int(x) for x in order.split(","))
        mod.ORDER = TileOrder(hg=hg, snake=bool(snake))
    emit = emitter.emit_attention
    if rewrite is not None:
        import issue_probe
        edit = getattr(issue_probe, rewrite)
        emitter.emit_attention = lambda *a, **k: edit(emit(*a, **k))
    try:
        with ac.params_over(mod, params):
            yield
    finally:
        mod.ORDER = None
        emitter.emit_attention = emit


def build(mod, name: str, causal: bool, q, k, v) -> dict:
    """Variant ``name``'s kernels, built through the call (and its disk cache), and its
    arguments for ``q, k, v`` packed (the order among them) and kept by the call."""
    mod.CALL.kernels.clear()
    try:
        with variant(mod, name):
            mod.attention(q, k, v, causal=causal)
        return dict(mod.CALL.kernels)
    finally:
        mod.CALL.kernels.clear()


def check(torch, mod, name, kernels, peers, b, h, sq, sk, d, causal) -> dict:
    """One correctness case of variant ``name`` through ``kernels`` (attention_call.run_case's
    rule)."""
    mod.CALL.kernels.clear()
    mod.CALL.kernels.update(kernels)
    with variant(mod, name):
        rec = ac.run_case(torch, mod, peers, b, h, sq, sk, d, "bf16", causal)
    mod.CALL.kernels.clear()
    return rec


def prebuild(mod, configs, names) -> None:
    """The kernels each variant's timing and checks launch at ``configs`` (the timed shape and
    the short one with tails, no LSE stored: no gradient asked), built into the disk cache."""
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.kit_api import BUILD_OPTIONS
    from pipeline_core_nvidia_h100.runtime import ARCH

    from pipeline_core_schedules_attention.signature import KERNEL_NAME
    built = 0
    for cfg in configs:
        d, s, causal = parse_config(cfg)
        for name in names:
            with variant(mod, name):
                tiled = (d, causal) in mod.SHORT_TILES
                for short in sorted({tiled and sk <= mod.SHORT_KEYS for sk in (s, 777)}):
                    _, src = mod._source(d, "bf16", causal, "top_left", short, lse=False)
                    cubin_path(src, KERNEL_NAME, BUILD_OPTIONS, ARCH)
                    built += 1
    print(json.dumps({"kind": "prebuild", "kernels": built}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=str(ac.ROOT.parent / "shared" / "tools" /
                                             "gemm_anchors.py"))
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--configs", default="64x1024,64x1024c")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--prebuild-only", action="store_true",
                    help="each variant's kernels for --configs built into the disk cache "
                         "(PIPELINE_CORE_CACHE_DIR) with nvcc, no GPU")
    args = ap.parse_args(argv)
    import pipeline_core_schedules_attention.call as mod
    if args.prebuild_only:
        prebuild(mod, args.configs.split(","), args.variants.split(","))
        return 0
    import torch

    peers = load_anchors(args.anchors).attention_peers()
    torch.manual_seed(0)
    failed = 0
    for cfg in args.configs.split(","):
        d, s, causal = parse_config(cfg)
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        built = {}
        for name in args.variants.split(","):
            try:
                built[name] = build(mod, name, causal, q, k, v)
            except Exception as e:  # a refused variant (registers, shared memory): one line
                emit({"kind": "refused", "config": cfg, "variant": name,
                      "why": str(e).splitlines()[0] if str(e) else repr(e)})
                continue
            # the timed shape where its fp32 reference fits (S <= 4096), and one with tails
            shapes = ((b, h, s, s),) if b * h * s * s <= REFERENCE_SCORES else ()
            for shape in (*shapes, (1, 3, 1000, 777)) if "probe" not in VARIANTS[name] else ():
                rec = check(torch, mod, name, built[name], peers, *shape, d, causal)
                emit({**rec, "config": cfg, "variant": name})
                if not rec["ok"]:
                    failed += 1
                    built.pop(name, None)
                    break

        fns = {**{n: ac.with_kernels(mod, kern, q, k, v, causal) for n, kern in built.items()},
               **{n: (lambda f=f: f(q, k, v, causal)) for n, f in peers.items()
                  if n in ("sdpa-flash", "sdpa-cudnn")}}
        fa4, why = fa4_peer.flash_attn_func()
        if fa4 is not None:  # FlashAttention-4's forward, on [B, S, H, D] copies of q, k, v
            qb, kb, vb = (fa4_peer.bshd(t) for t in (q, k, v))
            fns["fa4"] = lambda: fa4_peer.forward(fa4, qb, kb, vb, causal)
        elif cfg == args.configs.split(",")[0]:
            emit({"kind": "peer-missing", "name": "fa4", "why": why})
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        per = interleaved(torch, fns, args.rounds, 10)
        flop = 4 * b * h * s * s * d // (2 if causal else 1)
        for n in fns:
            ms = statistics.median(per[n])
            rec = {"kind": "time", "config": cfg, "name": n, "D": d, "S": s, "B": b, "H": h,
                   "causal": causal, "ms": round(ms, 4), "tflops": round(flop / ms / 1e9, 1),
                   "device": torch.cuda.get_device_name()}
            if n in VARIANTS:
                short = s <= mod.SHORT_KEYS
                rec["params"] = {**mod.call_params(d, causal, short=short), **VARIANTS[n],
                                 "stages": str(mod.call_stages(d, causal, short))}
                rec["params"].update(VARIANTS[n])
                for peer in ("sdpa-flash", "sdpa-cudnn", "fa4", "call"):
                    if peer in per and peer != n:
                        r = ratios(per, n, peer)
                        rec[f"vs_{peer}"] = {"median": statistics.median(r), "rounds": r}
            emit(rec)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "attention_tiles.jsonl", "a") as f:
            for r in LINES:
                f.write(json.dumps(r) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

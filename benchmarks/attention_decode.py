"""``attention_decode()`` on the GPU (issue 38, decoding over a KV cache): correctness, a decode
loop in a CUDA graph, sanitizers and bandwidth (docs/guide/attention.md, "Decoding over a KV
cache").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_decode.py
  ... attention_decode.py --prebuild-only   # no GPU: every cubin into PIPELINE_CORE_CACHE_DIR
  ... attention_decode.py --sanitize        # racecheck + synccheck at small shapes
  ... attention_decode.py --dry-run         # the configurations, no torch

1. **correct**: ``--cases`` (72) decode steps: contiguous caches and pages of 16 and 64 (the
   pages in a random order, the table's spare entries garbage), lengths from {0, 1, 7, 128,
   page + 1, 4096, 100000} mixed in a batch of 2 to 4, Sq 1, 2, 4, 16 and 128, GQA ratios 1, 4,
   7, 8 and 16, causal and not (Sq > 1), D 64 / 128 / 256, bf16 / fp16, unsplit and split (the call
   picks; a long cache at a small batch splits).  Every cache row past a sequence's length and
   every unused page is NaN (a kernel that lets one into a sum fails), the output and LSE
   memory NaN-poisoned.  Per sequence against an fp32 reference: within 1.5x SDPA's error on
   the same sequence (attention_varlen's bound rules), LSE within :data:`LSE_TOL`.
2. **loop**: a decode loop of 8 steps (append the new token's K and V, then attend) captured
   in one CUDA graph and replayed against the eager loop, bit for bit.
3. **time** (one process, interleaved rounds, CUDA-graph replays): Sq 1, D 128, bf16: batch 1,
   8, 64 over KV lengths 1k-128k, Hq/Hkv 32/8 and 64/8; ours contiguous and paged (16, 64)
   against SDPA's cuDNN and flash backends on the contiguous cache (grouped-query heads), and
   the bandwidth: bytes of K and V read / time, against a same-run device-to-device copy.
   Per-round ratios ours / peer (above 1: ours faster).  ``--layout both`` adds the same
   values stored head-major (``[B, Hkv, capacity, D]`` contiguous, viewed as ``[B, capacity,
   Hkv, D]``: one KV head's rows one run) for ours and SDPA alike (names ``-hm``);
   ``--pages``, ``--peers`` and ``--shapes`` time a subset, ``--variant`` a patched schedule
   (:func:`variant`; one per process, so compare its per-round ratios to a peer), ``--tokens
   N`` N query tokens a sequence (speculative decoding; every call not causal).

The last line is one PASS/FAIL summary.  Every result is one JSON line on stdout (and in
--out/attention_decode.jsonl).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

import fa4_peer  # noqa: E402  (beside this script)
from attention_checks import peer  # noqa: E402  (beside this script)
from attention_varlen import poison, reference, rel  # noqa: E402  (beside this script)
from bench_checks import (check_args, dispatch, each_case,  # noqa: E402  (beside this script)
                          emit, prebuild as build_all)
from bench_timing import graphed, interleaved, ratios  # noqa: E402  (beside this script)

PAGES = (0, 16, 64)  # 0: contiguous
HEADS = ((8, 8), (32, 8), (28, 4), (64, 8), (16, 1))
TOKENS = (1, 2, 4, 16, 128)
MIN_BOUND = 1e-3
FIXED_BOUND = {"bf16": 2e-2, "fp16": 2.5e-3}
LSE_TOL = 1e-2


def lengths_for(page: int) -> tuple[int, ...]:
    return (0, 1, 7, 128, (page or 64) + 1, 4096, 100000)


def configs(rng: random.Random, n: int) -> list[tuple]:
    """``n`` cases (page, lengths, sq, hq, hkv, D, dtype, causal, head_major): every third
    paged case of pages of 16 keeps each page's rows head-major (``cache``), so its heads are
    not dense in a row and the kernel copies each 64-column part apart (KvLayout)."""
    out = []
    for i in range(n):
        page = PAGES[i % 3]
        sq = TOKENS[(i // 3) % len(TOKENS)]
        hq, hkv = HEADS[(i // 2) % len(HEADS)]
        d = (128, 64, 256)[(i // 5) % 3]
        dtype = ("bf16", "fp16")[(i // 7) % 2]
        causal = sq > 1 and i % 4 != 1
        pool = [x for x in lengths_for(page) if sq < 128 or x <= 4096]
        lens = [pool[(i + j) % len(pool)] if j == 0 else rng.choice(pool)
                for j in range(rng.randint(2, 4))]
        if i % 6 == 0:  # a batch that splits: one long sequence alone
            lens = [rng.choice((4096, 100000)) if sq < 128 else 4096]
        out.append((page, tuple(lens), sq, hq, hkv, d, dtype, causal,
                    page == 16 and i % 9 == 1))
    return out


def _dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def cache(torch, page: int, lens, hkv: int, d: int, dtype, rng: random.Random, extra: int = 0,
          head_major: bool = False):
    """(k_cache, v_cache, block_table, seqlens, keys): the caches NaN wherever no sequence's
    key lies (rows past a length, unused pages), ``keys[b]`` sequence b's fresh K and V
    ([len, Hkv, D] each); paged, the pages in a random order and the table's spare entries
    garbage.  ``extra`` rows of room past the longest (a decode loop appends there).
    ``head_major`` (paged): the same values with each page's rows stored head-major, a
    ``[pages, page_size, Hkv, D]`` view of ``[pages, Hkv, page_size, D]`` (FlashInfer's HND)."""
    cap = max(lens) + extra
    dt = _dtype(torch, dtype)
    keys = [(torch.randn(n, hkv, d, device="cuda", dtype=dt),
             torch.randn(n, hkv, d, device="cuda", dtype=dt)) for n in lens]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if page == 0:
        kc = torch.full((len(lens), max(cap, 1), hkv, d), float("nan"), device="cuda", dtype=dt)
        vc = kc.clone()
        for b, (k, v) in enumerate(keys):
            kc[b, :len(k)], vc[b, :len(v)] = k, v
        return kc, vc, None, seqlens, keys
    per = [-(-(n + extra) // page) for n in lens]
    width = max(per) + 2
    order = list(range(sum(per) + 3))  # three spare pages nobody's
    rng.shuffle(order)
    table = torch.full((len(lens), width), 2 ** 30, dtype=torch.int32)  # garbage past the end
    used = order[:sum(per)]
    at = 0
    for b, n in enumerate(per):
        table[b, :n] = torch.tensor(used[at:at + n], dtype=torch.int32)
        at += n
    kc = torch.full((len(order), page, hkv, d), float("nan"), device="cuda", dtype=dt)
    vc = kc.clone()
    if used:  # every sequence's keys padded with NaN to its pages, then scattered to them
        idx = torch.tensor(used, device="cuda")
        for c, j in ((kc, 0), (vc, 1)):
            rows = torch.cat([torch.cat([kv[j], torch.full((per[b] * page - len(kv[j]), hkv, d),
                                                            float("nan"), device="cuda",
                                                            dtype=dt)])
                              for b, kv in enumerate(keys)])
            c[idx] = rows.view(-1, page, hkv, d)
    if head_major:
        kc, vc = (c.transpose(1, 2).contiguous().transpose(1, 2) for c in (kc, vc))
    return kc, vc, table.cuda(), seqlens, keys


def case_check(torch, attention_decode, case, rng: random.Random) -> dict:
    page, lens, sq, hq, hkv, d, dtype, causal, head_major = case
    kc, vc, table, seqlens, keys = cache(torch, page, lens, hkv, d, dtype, rng,
                                         head_major=head_major)
    q = torch.randn(len(lens), sq, hq, d, device="cuda", dtype=_dtype(torch, dtype))
    scale = 1 / math.sqrt(d)
    poison(torch, q, torch.empty(len(lens) * hq * sq, device="cuda"))
    out, lse = attention_decode(q, kc, vc, cache_seqlens=seqlens, block_table=table,
                                causal=causal, return_lse=True)
    torch.cuda.synchronize()
    worst, fails = 0.0, []
    how = "bottom_right" if causal else False
    for b, (k, v) in enumerate(keys):
        qs, ks, vs = q[b].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        got, got_lse = out[b].transpose(0, 1), lse[b]
        ref, ref_lse, keyed = reference(torch, qs, ks, vs, scale, how)
        if bool((~keyed).any()):
            if (bool(got[:, ~keyed].ne(0).any())
                    or not bool(torch.isposinf(got_lse[:, ~keyed]).all())):
                fails.append(f"seq {b}: a row with no key is not 0 / LSE +inf")
        if not bool(keyed.any()):
            continue
        err = rel(torch, got[:, keyed], ref[:, keyed])
        lse_err = float((got_lse[:, keyed] - ref_lse[:, keyed]).abs().max())
        name, po = peer(torch, qs[None], ks[None], vs[None], how) if len(k) else (None, None)
        perr = (rel(torch, po[0][:, keyed], ref[:, keyed]) if po is not None
                and bool(torch.isfinite(po[0][:, keyed]).all()) else None)
        bound = max(1.5 * perr, MIN_BOUND) if perr is not None else FIXED_BOUND[dtype]
        worst = max(worst, err / bound)
        if err > bound or not lse_err <= LSE_TOL:
            fails.append(f"seq {b} ({sq}x{len(k)}): error {err:.2e} (bound {bound:.2e}, "
                         f"{name or 'fixed'}), lse {lse_err:.2e}")
    from pipeline_core_schedules_attention.decode_call import DECODE

    splits = max((r.plan[1] for r in DECODE.recipes._items.values()), default=1)
    return {"kind": "case", "page": page, "head_major": head_major, "lengths": list(lens),
            "sq": sq, "hq": hq,
            "hkv": hkv, "D": d, "dtype": dtype, "causal": causal, "ok": not fails,
            "splits_seen": splits, "worst_ratio_to_bound": round(worst, 3), "fails": fails}


def correct(torch, cases: int, seed: int) -> bool:
    from pipeline_core_schedules_attention.decode_call import attention_decode

    rng = random.Random(seed)

    def check(case: tuple) -> dict:
        try:
            return case_check(torch, attention_decode, case, rng)
        finally:
            torch.cuda.empty_cache()  # the long caches go before the next case's
    return each_case(configs(random.Random(seed), cases), check)


def loop(torch) -> bool:
    """A decode loop (append, attend; 8 steps) captured in one graph, replayed from the same
    start as the eager loop: bit for bit, contiguous and paged; captured on the warm-up's
    stream and on torch.cuda.graph's own."""
    from pipeline_core_schedules_attention.decode_call import append_kv_cache, attention_decode

    same = True
    for page in (0, 16):
        rng = random.Random(1)
        lens = [300, 5000, 17]
        kc, vc, table, seqlens, _ = cache(torch, page, lens, 8, 128, "bf16", rng, extra=16)
        steps = [[torch.randn(3, 1, n, 128, device="cuda", dtype=torch.bfloat16)
                  for n in (32, 8, 8)] for _ in range(8)]
        start = (kc.clone(), vc.clone(), seqlens.clone())

        def run():
            outs = []
            for q, k, v in steps:
                append_kv_cache(kc, vc, k, v, cache_seqlens=seqlens, block_table=table)
                seqlens.add_(1)
                outs.append(attention_decode(q, kc, vc, cache_seqlens=seqlens,
                                             block_table=table))
            return torch.stack(outs)

        def reset():
            kc.copy_(start[0]), vc.copy_(start[1]), seqlens.copy_(start[2])

        eager = run()
        reset()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
            reset()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                captured = run()
        torch.cuda.current_stream().wait_stream(side)
        reset()
        g.replay()
        torch.cuda.synchronize()
        eq = bool(torch.equal(captured, eager)) and bool(torch.isfinite(eager).all())
        emit({"kind": "loop", "page": page, "bitwise_equal": eq})
        same &= eq
        # captured the usual way: torch.cuda.graph's own capture stream, which no eager call
        # ran on (its split workspace the capture's own: split as the eager loop is)
        usual = torch.cuda.CUDAGraph()
        reset()
        with torch.cuda.graph(usual):
            got = run()
        reset()
        got.fill_(float("nan"))
        usual.replay()
        torch.cuda.synchronize()
        eq = bool(torch.equal(got, eager))
        emit({"kind": "loop-own-capture-stream", "page": page, "bitwise_equal": eq})
        same &= eq
        # the op under torch.compile (fullgraph: no break), bit for bit the eager call
        q = steps[0][0]

        def step(q, lens):
            return attention_decode(q, kc, vc, cache_seqlens=lens, block_table=table,
                                    return_lse=True)
        want = step(q, seqlens)
        got = torch.compile(step, fullgraph=True)(q, seqlens)
        torch.cuda.synchronize()
        eq = all(bool(torch.equal(a, b)) for a, b in zip(got, want))
        emit({"kind": "compile", "page": page, "bitwise_equal": eq})
        same &= eq
    return same


#: the timed steps: (batch, KV length, Hq, Hkv)
SHAPES = ((1, 8192, 32, 8), (1, 32768, 32, 8), (1, 131072, 32, 8), (1, 131072, 64, 8),
          (8, 1024, 32, 8), (8, 8192, 32, 8), (8, 32768, 32, 8), (8, 32768, 64, 8),
          (64, 1024, 32, 8), (64, 8192, 32, 8))


def head_major(torch, c):
    """The same values stored head-major: a ``[B, capacity, Hkv, D]`` view of a contiguous
    ``[B, Hkv, capacity, D]`` tensor, whose KV head's rows are one contiguous run."""
    return c.transpose(1, 2).contiguous().transpose(1, 2)


def timing(torch, rounds: int, seed: int, layouts: tuple[str, ...] = ("row",),
           pages: tuple[int, ...] = PAGES,
           peers: tuple[str, ...] = ("cudnn", "flash"), tokens: int = 1) -> list[dict]:
    """``layouts``: the contiguous cache row-major (``row``, ``[B, capacity, Hkv, D]``
    contiguous, as a decode loop appends to) and/or head-major (``head``: the same values in a
    contiguous ``[B, Hkv, capacity, D]``), ours and SDPA each on both (names ``-hm``).
    ``tokens`` query tokens a sequence (speculative decoding's), every call not causal."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pipeline_core_schedules_attention.decode_call import attention_decode

    rng, out = random.Random(seed), []
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for b, n, hq, hkv in SHAPES:
        try:
            d = 128
            q = torch.randn(b, tokens, hq, d, device="cuda", dtype=torch.bfloat16)
            kv_bytes = 2 * b * n * hkv * d * 2
            caches = {p: cache(torch, p, [n] * b, hkv, d, "bf16", rng)[:4]
                      for p in sorted({0, *pages})}
            kc, vc, _, lens0 = caches[0]
            contig = {("row", ""): (kc, vc)}
            if "head" in layouts:
                contig[("head", "-hm")] = (head_major(torch, kc), head_major(torch, vc))
            if "row" not in layouts:
                del contig[("row", "")]
            fns = {}
            for p, (kc, vc, table, lens) in caches.items():
                if p:
                    fns[f"ours-page{p}"] = graphed(
                        torch, lambda kc=kc, vc=vc, table=table, lens=lens: attention_decode(
                            q, kc, vc, cache_seqlens=lens, block_table=table, causal=False))
            for (_, tag), (kc, vc) in contig.items():
                fns[f"ours-contig{tag}"] = graphed(
                    torch, lambda kc=kc, vc=vc: attention_decode(q, kc, vc, cache_seqlens=lens0,
                                                                 causal=False))
            backends = {"cudnn": SDPBackend.CUDNN_ATTENTION,
                        "flash": SDPBackend.FLASH_ATTENTION}
            for (_, tag), (kc, vc) in contig.items():
                qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)
                for peer_name in [p for p in peers if p in backends]:
                    name = f"sdpa-{peer_name}{tag}"

                    def sdpa(be=backends[peer_name], qt=qt, kt=kt, vt=vt):
                        with sdpa_kernel([be]):
                            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
                    add_peer(torch, fns, name, sdpa, [b, n, hq, hkv])
            if "fa4" in peers:  # FlashAttention-4 on our caches: seqused_k, pages by its table
                fa4_peers(torch, fns, q, caches, b, n, hq, hkv)
            copy_bytes = min(kv_bytes, src.numel())
            fns["copy"] = lambda: dst[:copy_bytes].copy_(src[:copy_bytes])
            per = interleaved(torch, fns, rounds, 20)
            rec = {"kind": "time", "batch": b, "kv_len": n, "tokens": tokens, "hq": hq,
                   "hkv": hkv, "D": d,
                   "kv_bytes": kv_bytes,
                   "ms": {k: round(statistics.median(v), 4) for k, v in per.items()},
                   "tb_per_s": {k: round(kv_bytes / statistics.median(v) / 1e9, 3)
                                for k, v in per.items() if k != "copy"},
                   "copy_tb_per_s": round(2 * copy_bytes / statistics.median(per["copy"])
                                          / 1e9, 3),
                   "device": torch.cuda.get_device_name()}
            for ours in [k for k in per if k.startswith("ours")]:
                for peer_name in [k for k in per if k.startswith(("sdpa", "fa4"))]:
                    rec[f"{ours}/{peer_name}"] = ratios(per, ours, peer_name)
            if "ours-contig" in per:
                for ours in [k for k in per if k.startswith("ours-page")]:
                    rec[f"{ours}/ours-contig"] = ratios(per, ours, "ours-contig")
            emit(rec)
            out.append(rec)
            del caches, fns, contig
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            emit({"kind": "time-error", "shape": [b, n, hq, hkv],
                  "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
        torch.cuda.empty_cache()
    return out


def fa4_peers(torch, fns: dict, q, caches: dict, b: int, n: int, hq: int, hkv: int) -> None:
    """FlashAttention-4's ``flash_attn_varlen_func`` (``fa4_peer.py``) on each cache of the step
    into ``fns`` (``fa4-contig``, ``fa4-page{p}``), its default split count (1), where it
    imports and takes the cache; a refusal is one line (Hopper has no split-KV there)."""
    f, why = fa4_peer.flash_attn_varlen_func()
    if f is None:
        emit({"kind": "peer-refused", "peer": "fa4", "shape": [b, n, hq, hkv], "error": why})
        return
    for p, (kc, vc, table, lens) in caches.items():
        name = f"fa4-page{p}" if p else "fa4-contig"

        if p:  # the spare entries past each sequence's pages in range (they are garbage)
            table = torch.where(table < kc.shape[0], table, torch.zeros_like(table))

        def run(kc=kc, vc=vc, table=table if p else None, lens=lens):
            out = f(q, kc, vc, seqused_k=lens, page_table=table)
            return out[0] if isinstance(out, tuple) else out
        add_peer(torch, fns, name, run, [b, n, hq, hkv])


def add_peer(torch, fns: dict, name: str, fn, shape: list[int]) -> None:
    """A peer's call into ``fns`` as a CUDA graph, once it ran eagerly; where it refuses the
    step, one ``peer-refused`` line and no entry."""
    try:
        fn()
        torch.cuda.synchronize()
        fns[name] = graphed(torch, fn)
    except Exception as exc:  # noqa: BLE001 - the peer refuses it
        emit({"kind": "peer-refused", "peer": name, "shape": shape,
              "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})


def sanitize_run(torch) -> None:
    """Small decode steps under the sanitizer: a page boundary inside a block, lengths 0, 1,
    page + 1 and several blocks with a tail, unsplit and split, causal and not."""
    from pipeline_core_schedules_attention.decode_call import attention_decode

    rng = random.Random(0)
    for page, head_major in ((0, False), (16, False), (16, True)):
        for sq, causal in ((1, False), (4, True)):
            for lens in ([0, 1, 17, 300], [700]):  # the second splits
                kc, vc, table, seqlens, _ = cache(torch, page, lens, 2, 128, "bf16", rng,
                                                  head_major=head_major)
                q = torch.randn(len(lens), sq, 8, 128, device="cuda", dtype=torch.bfloat16)
                out = attention_decode(q, kc, vc, cache_seqlens=seqlens, block_table=table,
                                       causal=causal)
                torch.cuda.synchronize()
                print(json.dumps({"kind": "sanitized-run", "page": page,
                                  "head_major": head_major, "sq": sq,
                                  "lens": lens, "nan": bool(torch.isnan(out).any())}),
                      flush=True)


def _build(key: tuple) -> bool:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.decode_call import decode_source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    return cubin_path(decode_source(*key)[1], KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None


def prebuild(jobs: int, spec: str = "", pages: tuple[int, ...] = PAGES) -> None:
    """Every decode kernel (decode_call.VARIANTS) into PIPELINE_CORE_CACHE_DIR (no GPU); with
    a ``--variant``, the timed ones (D 128, bf16, not causal) of ``pages`` alone."""
    from pipeline_core_schedules_attention.decode_call import BLOCKS, VARIANTS
    from pipeline_core_schedules_attention.decode_tiles import chunk_rows

    def checked(v: tuple) -> bool:  # the pages checked here, at the variant's block
        bn = BLOCKS[v[0]][0]
        return v[4] in {bn // chunk_rows(p, bn) for p in (PAGES if not spec else pages)}
    keys = [v for v in VARIANTS if checked(v) and (not spec or v[:3] == (128, "bf16", False))]
    build_all(keys, _build, jobs, initializer=variant, initargs=(spec,))


def variant(spec: str) -> None:
    """A schedule variant of the call's kernels for a timing experiment (``--variant``:
    ``bn=64,stages=6,intra=false``): the call's tile constants patched in this process.  Also
    ``splits=N`` (a fixed split count where the workspace holds it), ``balanced=1`` (split s
    takes blocks [s NB / S, (s + 1) NB / S), the emitted C edited), ``ctas=2`` (two CTAs a
    SM: the launch bounds, a register split ``preg``/``creg`` and the grid; with a ring that
    fits twice, e.g. ``bn=64,stages=2,qs=1``), ``order=splits`` (the split outermost in the
    tile order, so a CTA's later (tile, split) pairs keep every KV head of a row range
    together), ``rows=64`` (the 64-row tile where the call takes a narrow one), ``issuers=1``
    (one thread issuing a paged block's copies), ``grouped=0`` (pages copied a part at a time),
    ``early=1|2`` (the first tile's length, and its first table entry at the capacity's split,
    prefetched to L2 as the kernel starts), and the timing
    probes ``no_mma=1`` and ``no_math=1`` (results wrong)."""
    from pipeline_core_schedules_attention import decode_call

    if not spec or getattr(decode_call, "_variant", None) == spec:
        return  # none, or already applied (a prebuild worker forked from this process)
    decode_call._variant = spec  # type: ignore[attr-defined]
    opts = dict(kv.split("=") for kv in spec.split(","))
    if "bn" in opts or "stages" in opts:  # D 128's block and ring depth
        bn, stages, qs = decode_call.BLOCKS[128]
        decode_call.BLOCKS = {**decode_call.BLOCKS, 128: (int(opts.get("bn", bn)),
                                                          int(opts.get("stages", stages)), qs)}
    if "contig_chunks" in opts:  # a contiguous cache copied in several row chunks a block
        chunks = decode_call.DecodeCall.chunks

        def contig(self, chunks=chunks):
            return chunks.fget(self) if self.paged else int(opts["contig_chunks"])
        decode_call.DecodeCall.chunks = property(contig)
    if "grouped" in opts:  # paged stages grouped (1) or one copy a part (0), forced
        decode_call.DecodeCall.grouped = property(
            lambda self: self.paged and self.chunks > 1 and bool(int(opts["grouped"])))
    if "rows" in opts:  # the tile's rows forced (64: the wide tile where a narrow one fits)
        decode_call.DecodeCall.rows = property(lambda self: int(opts["rows"]))
    if "split_scale" in opts:  # the wave model's split count scaled
        choose = decode_call.choose_splits
        decode_call.choose_splits = lambda t, b, s: max(1, min(b, round(
            choose(t, b, s) * float(opts["split_scale"]))))
    for key, param in (("intra", "intra_overlap"), ("qs", "q_stages"), ("issuers", "kv_issuers")):
        if key in opts:
            plain = decode_call.decode_params
            decode_call.decode_params = (lambda *a, plain=plain, param=param, value=opts[key]:
                                         {**plain(*a), param: value})
    if "splits" in opts:  # a fixed split count where the workspace holds it, else the model's
        choose, fixed = decode_call.choose_splits, int(opts["splits"])
        decode_call.choose_splits = lambda t, b, s: (
            min(fixed, b) if t * fixed <= decode_call.MAX_SLOTS_PER_SM * s else choose(t, b, s))
    if "ctas" in opts:  # CTAs per SM: the persistent grid and the wave model see that many
        from pipeline_core_nvidia_h100.runtime import KernelBuilder

        sms, per = decode_call.sm_count, int(opts["ctas"])
        decode_call.sm_count = lambda device: per * sms(device)
        plain_set = KernelBuilder.set_max_dynamic_shared

        def carve(kernel, nbytes, plain=plain_set):  # the most shared memory for the L1 split
            plain(kernel, nbytes)
            kernel.preferred_shared_memory_carveout = 100
        KernelBuilder.set_max_dynamic_shared = staticmethod(carve)
    edits: list[tuple[str, str]] = []
    if "balanced" in opts:  # split s takes blocks [s NB / S, (s + 1) NB / S)
        edits.append(("KF = split * per; KT = max(0, min(per, NB - KF));",
                      "KF = split * NB / SPLITS; KT = (split + 1) * NB / SPLITS - KF;"))
    if "early" in opts:  # the first tile's length (1) and, at the capacity's split, its first
        # table entry (2) prefetched to L2 as the kernel starts (a probe: what the dependent
        # reads before the first copy cost)
        pre = ["const int fb = (int)blockIdx.x / SPLITS / (QT * HC * Hkv);",
               "if (threadIdx.x == 0 && (int)blockIdx.x < TILES) asm volatile("
               "\"prefetch.global.L2 [%0];\" :: \"l\"(seqlens + fb));"]
        if opts["early"] == "2":
            pre.append("if (threadIdx.x == 0 && (int)blockIdx.x < TILES && table != nullptr) {"
                       " const int nb = (CAP + BN - 1) / BN, per = (nb + SPLITS - 1) / SPLITS;"
                       " asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(table + fb * "
                       "table_stride + ((int)blockIdx.x % SPLITS) * per * BN / page)); }")
        edits.append(("const int TILES = B * Hkv * HC * QT * SPLITS;",
                      "const int TILES = B * Hkv * HC * QT * SPLITS;\n    " + "\n    ".join(pre)))
    if "order" in opts:  # splits outermost: each wave of CTAs reads every KV head's rows
        edits.append(("const int split = tile % SPLITS, out_tile = tile / SPLITS,",
                      "const int split = tile / (TILES / SPLITS), out_tile = tile % (TILES / "
                      "SPLITS),"))
    if "ctas" in opts:
        edits += [("__launch_bounds__(256, 1)", f"__launch_bounds__(256, {opts['ctas']})"),
                  ("PRODUCER_REGS = 120, CONSUMER_REGS = 240",
                   f"PRODUCER_REGS = {opts.get('preg', 56)}, "
                   f"CONSUMER_REGS = {opts.get('creg', 200)}")]
    # timing probes, wrong results: the consumer's wgmma (``no_mma``) or all its math
    # (``no_math``) dropped, the ring's waits and releases kept: what the stream reaches alone
    drop = ((("pcat::qk<", "pcat::decode_pv<") if "no_mma" in opts else ())
            + (("pcat::qk<", "pcat::decode_pv<", "pcat::softmax<", "pcat::rescale<")
               if "no_math" in opts else ()))
    if edits or drop:
        plain_source = decode_call.decode_source

        def patched(*a, plain=plain_source):
            compiled, src = plain(*a)
            for old, new in edits:
                if old not in src:
                    raise RuntimeError(f"variant edit: {old!r} not in the source")
                src = src.replace(old, new)
            if drop:
                src = "\n".join(";" if line.strip().startswith(drop) else line
                                for line in src.splitlines())
            return compiled, src
        decode_call.decode_source = patched
    emit({"kind": "variant", "spec": spec})


def main() -> None:
    args = check_args(("all", "correct", "loop", "time", "sanitize-run"),
                      "attention_decode.jsonl",
                      (("--cases", int, 72), ("--rounds", int, 5), ("--seed", int, 0),
                       ("--jobs", int, 2), ("--timeout", float, 600.0), ("--variant", str, ""),
                       ("--shapes", str, ""), ("--layout", str, "row"),
                       ("--pages", str, ",".join(map(str, PAGES))),
                       ("--peers", str, "cudnn,flash"), ("--tokens", int, 1)))
    variant(args.variant)
    if args.shapes:  # a subset of SHAPES by index (a variant's quick timing)
        global SHAPES
        SHAPES = tuple(SHAPES[int(i)] for i in args.shapes.split(","))
    dispatch(args, Path(__file__), configs(random.Random(args.seed), args.cases), 12,
             lambda: prebuild(args.jobs, args.variant, _ints(args.pages)), sanitize_run,
             lambda torch: gpu(torch, args))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def gpu(torch, args: argparse.Namespace) -> dict:
    """The GPU phases (``--phase``): whether each check passed, and the timed count."""
    checks = {"correct": lambda: correct(torch, args.cases, args.seed),
              "loop": lambda: loop(torch)}
    with torch.inference_mode():
        passed = {name: check() for name, check in checks.items()
                  if args.phase in ("all", name)}
        timed = (timing(torch, args.rounds, args.seed,
                        tuple(args.layout.split(",")) if args.layout != "both"
                        else ("row", "head"), _ints(args.pages),
                        tuple(p for p in args.peers.split(",") if p), args.tokens)
                 if args.phase in ("all", "time") else [])
    return {**passed, "timed": len(timed)}


if __name__ == "__main__":
    main()

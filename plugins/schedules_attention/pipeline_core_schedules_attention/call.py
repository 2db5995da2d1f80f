"""``attention(q, k, v, *, causal=False, scale=None)``: the emitted flash-attention-fwd kernel
called on torch tensors (docs/guide/attention.md, "Emitting and calling it").

It lives in this plugin, not beside ``matmul`` in ``pipeline_core_nvidia_h100``, because this
plugin owns the kernel family's device code (``emit_attention.py``) and its schedule; the H100
plugin gives the host side it shares with the GEMM: the TMA tensor maps (``tma.py``), the
kernel cache on disk (``kernel_cache.py``) and the launch on torch's current stream
(``runtime.py``).  The kernel is compiled (and proven) once per (head dim, dtype, causal, device),
launched on a persistent grid, and allocates nothing but the output.  ``causal=True`` compiles
the schedule with ``-p causal=true`` (top-left aligned, as torch's ``is_causal``): the plan's
loop bounds skip the KV blocks above the diagonal and mask the diagonal's.  The tile and the overlaps
it compiles are the fastest measured per head dim and causal (``CALL_TILES``,
``CALL_OVERLAPS``; benchmarks/results/attention_speed2_h100.jsonl, docs/guide/attention.md
"Speed: the FA3 softmax and the tiles")."""
from __future__ import annotations

import math
from typing import Any

import attrs

DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}
#: the schedule's parameters the call compiles (emit_attention.py: the variants it writes)
CALL_PARAMS: dict[str, str] = {}
#: the tile per (head dim, causal), the fastest measured on the H100 (bf16, benchmarks/results/
#: attention_speed2_h100.jsonl), FA3's choices: not causal, D=128 on KV blocks of 176 keys and
#: D=64 on 3 consumer warp groups (block_m 192, 160 registers each, so that 3 x 128 x 160 +
#: 128 x 24 fit the SM's 65536); causal, 2 consumers of 64 rows on KV blocks of 128 (the
#: diagonal then masks one KV block per query block)
_TWO = {"block_m": "128", "consumers": "2", "block_n": "128"}
CALL_TILES = {(64, False): {"block_m": "192", "consumers": "3", "consumer_registers": "160",
                            "block_n": "128"},
              (64, True): _TWO,
              (128, False): {**_TWO, "block_n": "176"},
              (128, True): _TWO}
#: the overlaps per head dim, the fastest on the H100 (bf16, benchmarks/results/
#: attention_speed2_h100.jsonl): the intra-warpgroup overlap alone, at both head dims, causal
#: or not (D=128 S=4096: 681 TFLOPS vs 584 without either; ping-pong costs: 641 with it).
#: An entry of CALL_PARAMS wins over these and CALL_TILES (the benchmark's ablations).
CALL_OVERLAPS = {64: {"intra_overlap": "true", "pingpong": "false"},
                 128: {"intra_overlap": "true", "pingpong": "false"}}
#: the head dims the call compiles
HEAD_DIMS = tuple(CALL_OVERLAPS)
CALL_STAGES = 2
LOG2E = 1.4426950408889634


class AttentionArgumentError(ValueError):
    """An argument ``attention`` cannot run on (the message names it and the fix)."""


@attrs.frozen(kw_only=True)
class AttentionCall:
    """What one call runs: the batch x heads, the query and key lengths, the head dim, the
    dtype and the softmax scale folded with log2(e) (the kernel's exp2)."""

    bh: int
    sq: int
    sk: int
    head_dim: int
    dtype: str
    scale_log2: float
    causal: bool


def plan_attention(q: Any, k: Any, v: Any, *, causal: bool = False,
                   scale: float | None = None) -> AttentionCall:
    """The call's plan, or one :class:`AttentionArgumentError` naming the argument at fault."""
    def fail(name: str, why: str) -> AttentionArgumentError:
        return AttentionArgumentError(f"attention: {name}: {why}")

    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != 4:
            raise fail(name, f"shape {tuple(t.shape)}; pass [B, H, S, D]")
        if not t.is_cuda:
            raise fail(name, "a CPU tensor; move it to the GPU with .cuda()")
        if str(t.dtype) not in DTYPES:
            raise fail(name, f"dtype {t.dtype}; pass torch.bfloat16 or torch.float16")
        if not t.is_contiguous():
            raise fail(name, "not contiguous in [B, H, S, D]; pass .contiguous()")
    b, h, sq, d = q.shape
    if d not in HEAD_DIMS:
        raise fail("q", f"head dim {d}; supported: {', '.join(map(str, HEAD_DIMS))}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise fail(name, f"dtype {t.dtype} differs from q's {q.dtype}; cast it")
        if t.device != q.device:
            raise fail(name, f"on {t.device}, q on {q.device}; put them on one device")
    if tuple(k.shape) != tuple(v.shape):
        raise fail("v", f"shape {tuple(v.shape)} differs from k's {tuple(k.shape)}")
    if (k.shape[0], k.shape[1], k.shape[3]) != (b, h, d):
        raise fail("k", f"shape {tuple(k.shape)}: batch, heads and head dim must be q's "
                        f"({b}, {h}, {d}); grouped-query attention is not supported")
    if sq < 1 or k.shape[2] < 1:
        raise fail("q" if sq < 1 else "k", "sequence length 0; pass S >= 1")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        # the kernel takes the row max of the raw scores and folds the scale into the exponent's
        # FFMA (FA3's softmax), which holds for a positive scale only (docs/guide/attention.md)
        raise fail("scale", f"{scale!r}; pass a positive finite float or None (1/sqrt(D))")
    s = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return AttentionCall(bh=b * h, sq=sq, sk=k.shape[2], head_dim=d,
                         dtype=DTYPES[str(q.dtype)], scale_log2=s * LOG2E, causal=bool(causal))


def call_params(head_dim: int, causal: bool) -> dict[str, str]:
    """The schedule parameters the call compiles for one head dim, causal or not."""
    return {**CALL_TILES[head_dim, causal], **CALL_OVERLAPS[head_dim], **CALL_PARAMS,
            "head_dim": str(head_dim),
            "causal": str(causal).lower()}


@attrs.frozen(kw_only=True)
class _Built:
    kernel: Any
    smem: int
    threads: int
    block_m: int
    block_n: int


_KERNELS: dict[tuple[int, str, bool, int], _Built] = {}
_MAPS: dict[tuple[int, int, int, int, str], Any] = {}
_SMS: dict[int, int] = {}
_REGISTERED: dict[str, Any] = {}


def _host() -> Any:
    from pipeline_core.plugin_api import PluginHost, default_host

    from pipeline_core_schedules_attention.schedule import NAME

    host = default_host()
    if NAME in host.schedules:
        return host
    return PluginHost(extra_modules=["pipeline_core_nvidia_h100.plugin",
                                     "pipeline_core_schedules_attention.plugin"])


def _build(head_dim: int, dtype: str, causal: bool, device: int) -> _Built:
    from pipeline_core.plugin_api import compile_named

    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.runtime import ARCH, KernelBuilder, _require
    from pipeline_core_nvidia_h100.skeleton import declared_geometry

    from pipeline_core_schedules_attention.emit_attention import KERNEL_NAME, emit_attention
    from pipeline_core_schedules_attention.schedule import (KERNEL_FAMILY, NAME,
                                                            AttentionGeometry)

    compiled = compile_named(NAME, target="h100", params=call_params(head_dim, causal),
                             target_args={"stages": str(CALL_STAGES)}, host=_host())
    g = declared_geometry(compiled, KERNEL_FAMILY, AttentionGeometry, "attention")
    source = emit_attention(compiled, dtype=dtype)
    cp = _require("cupy")
    with cp.cuda.Device(device):
        path = cubin_path(source, KERNEL_NAME, ("-std=c++17",), ARCH)
        if path is not None:
            kernel = cp.RawModule(path=str(path)).get_function(KERNEL_NAME)
        else:
            kernel = KernelBuilder().compile(source, KERNEL_NAME)
        KernelBuilder.set_max_dynamic_shared(kernel, g.smem_bytes)
    return _Built(kernel=kernel, smem=g.smem_bytes, threads=g.threads, block_m=g.block_m,
                  block_n=g.block_n)


def _map(t: Any, rows: int, d: int, box_rows: int, dtype: str) -> Any:
    from pipeline_core_nvidia_h100.tma import (DTYPE_BFLOAT16, DTYPE_FLOAT16, device_address,
                                               encode_tiled_2d)

    key = (device_address(t), rows, d, box_rows, dtype)
    found = _MAPS.get(key)
    if found is None:
        if len(_MAPS) > 256:
            _MAPS.clear()
        found = _MAPS[key] = encode_tiled_2d(
            key[0], rows, d, box_rows, 64,
            dtype=DTYPE_BFLOAT16 if dtype == "bf16" else DTYPE_FLOAT16)
    return found


def _run(q: Any, k: Any, v: Any, causal: bool, scale: float | None) -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]

    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    c = plan_attention(q, k, v, causal=causal, scale=scale)
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    key = (c.head_dim, c.dtype, c.causal, device)
    built = _KERNELS.get(key)
    if built is None:
        built = _KERNELS[key] = _build(c.head_dim, c.dtype, c.causal, device)
    sms = _SMS.get(device)
    if sms is None:
        sms = _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    out = torch.empty_like(q)
    tiles = c.bh * -(-c.sq // built.block_m)
    args = (_map(q, c.bh * c.sq, c.head_dim, built.block_m, c.dtype),
            _map(k, c.bh * c.sk, c.head_dim, built.block_n, c.dtype),
            _map(v, c.bh * c.sk, c.head_dim, built.block_n, c.dtype),
            out, c.bh, c.sq, c.sk, c.scale_log2)
    KernelBuilder().launch(built.kernel, (min(tiles, sms),), (built.threads,), args,
                           shared_mem=built.smem)
    return out


def _ops() -> Any:
    """The custom op ``pipeline_core::attention``, registered on first use."""
    if _REGISTERED:
        return _REGISTERED["ns"]
    import torch

    def op(q: Any, k: Any, v: Any, causal: bool, scale: float | None) -> Any:
        return _run(q, k, v, causal, scale)

    def fake(q: Any, k: Any, v: Any, causal: bool, scale: float | None) -> Any:
        return q.new_empty(q.shape)

    at = torch.library.custom_op("pipeline_core::attention", op, mutates_args=(),
                                 schema="(Tensor q, Tensor k, Tensor v, bool causal, "
                                        "float? scale) -> Tensor")
    at.register_fake(fake)
    _REGISTERED["ns"] = torch.ops.pipeline_core
    return _REGISTERED["ns"]


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None) -> Any:
    """softmax(q . k^T * scale) . v for torch tensors [B, H, S, D] (bf16 or fp16, D 64 or
    128, any S >= 1, query and key lengths may differ); ``scale`` defaults to 1/sqrt(D).
    Runs on torch's current stream and allocates only the output."""
    plan_attention(q, k, v, causal=causal, scale=scale)
    return _ops().attention(q, k, v, causal, None if scale is None else float(scale))

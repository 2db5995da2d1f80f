"""``HostCall``: the one PyTorch call layer every kernel family on the kit shares (issue 34).

Why one: ``matmul`` and ``attention`` each wrote their own plugin host, build cache (one locked,
one not), recipe cache, packed-argument cache, SM count, tensor-map cache (bounded two ways)
and custom-op registration.  A family now brings only what is its own: its checks and plan
(the recipe's ``plan``), how a kernel is built (``build``: compile its schedule, emit, load),
and how a recipe's arguments are packed (``pack``, through its ``KernelSignature``).

The launch path (docs/guide/matmul.md, "Speed"; docs/guide/attention.md, "The launch path"):
a call describes its arguments (``launch_cache.describe``), finds its :class:`Recipe` in
``recipes`` (checked, planned and its kernels built on the first call of a description), and
:meth:`HostCall.launch` finds the packed arguments in ``args`` (packed on the first call of the
recipe's addresses) and launches each :class:`Launch` on torch's current stream: two dictionary
lookups and the launch.  A recipe names its kernels by key in ``kernels``, a
:class:`KernelTable`, and they are looked up when its arguments are packed; a family that lets
a benchmark put another kernel in a key's place (an ablation, a mutant) names the kernel in
the packed arguments' key too, so a cached recipe launches what is there now.

An op of several kernels (a preprocess, a main and a postprocess kernel behind one call, as
FlashAttention's backward) is a recipe naming each kernel and a ``pack`` returning one
:class:`Launch` each: they go out in order on the one stream.  Custom ops (:class:`Op`) are
registered on first use with their fake implementation and, when the family gives a backward,
their autograd formula; such an op also gets an eager twin, a ``torch.autograd.Function`` of
the same implementation, ``setup_context`` and backward, which a call needing a gradient takes
outside tracing (:func:`autograd_function` says why).  Nothing here imports torch or CuPy at
import time.
"""
from __future__ import annotations

import sys

import threading
from collections.abc import Callable, Hashable, Iterator, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from pipeline_core_nvidia_h100.launch_cache import (Bounded, PackedArgs, current_stream, describe,
                                                    launch, needs_gradient, plain)
from pipeline_core_nvidia_h100.runtime import _require

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule

#: launch recipes kept per family (one per argument description; the oldest go first)
RECIPE_CACHE_SIZE = 1024
#: packed kernel arguments kept per family (one per recipe and addresses)
ARGS_CACHE_SIZE = 4096
#: host-side tensor maps kept per process (128 bytes each; the oldest go first)
MAP_CACHE_SIZE = 4096
#: nvcc's options for the families' kernels (the disk cache's key holds them)
BUILD_OPTIONS = ("-std=c++17",)

P = TypeVar("P")
B = TypeVar("B", bound="Built")


@attrs.frozen(kw_only=True, eq=False)
class Built:
    """A kernel loaded on one device, with the block and dynamic shared memory it launches
    with.  A family adds what its packer reads (subclass it); compared by identity."""

    kernel: Any
    smem: int
    threads: int


class KernelTable(MutableMapping[Hashable, B]):
    """Each kernel built once per process: ``kernel(key)`` builds a missing one with the
    family's ``build`` under ``lock`` (two threads asking for one kernel build it once).  A
    mapping otherwise, so a benchmark can put a variant or a mutant in a key's place, or clear
    it to build again."""

    def __init__(self, build: Callable[[Any], B], lock: threading.Lock) -> None:
        self._build, self.lock = build, lock
        self._built: dict[Hashable, B] = {}

    def kernel(self, key: Hashable) -> B:
        found = self._built.get(key)
        if found is None:
            with self.lock:
                found = self._built.get(key)
                if found is None:
                    found = self._built[key] = self._build(key)
        return found

    def __getitem__(self, key: Hashable) -> B:
        return self._built[key]

    def __setitem__(self, key: Hashable, built: B) -> None:
        self._built[key] = built

    def __delitem__(self, key: Hashable) -> None:
        del self._built[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._built))

    def __len__(self) -> int:
        return len(self._built)

    def clear(self) -> None:
        self._built.clear()


@attrs.frozen(kw_only=True, eq=False)
class Recipe(Generic[P]):
    """What one argument description launches, checked and planned once: the family's plan,
    the device and torch's stream, and the keys of its kernels in ``HostCall.kernels`` in
    launch order.  Compared by identity (a recipe is made once per description and kept)."""

    plan: P
    device: int
    stream: int
    kernels: tuple[Hashable, ...]


@attrs.frozen(kw_only=True, eq=False)
class Launch:
    """One kernel's launch, packed: the kernel, grid, block, dynamic shared memory and the
    arguments; with ``late``, the arguments are ``args``, then the call's late value (an
    output allocated per call) packed by ``late``, then ``tail``."""

    kernel: Any
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    args: PackedArgs
    late: Callable[[Any], Any] | None = None
    tail: tuple[Any, ...] = ()

    @classmethod
    def of(cls, built: Built, grid: tuple[int, ...], args: tuple[Any, ...],
           late: Callable[[Any], Any] | None = None, tail: tuple[Any, ...] = ()) -> Launch:
        """``args`` are kept packed (launch_cache.PackedArgs: the launch hands the driver
        their parameter array, built once; a late call's shares it, its late slots rewritten)."""
        return cls(kernel=built.kernel, grid=grid, block=(built.threads,), smem=built.smem,
                   args=PackedArgs(args), late=late, tail=tail)


@attrs.frozen(kw_only=True)
class Op:
    """A torch custom op: its qualified name (``namespace::name``), schema, implementation,
    fake (shapes only; where torch.compile traces, the checks), the arguments it writes and,
    for a differentiable op, its backward and the ``setup_context`` that saves what the
    backward reads (torch.library's ``register_autograd``)."""

    name: str
    schema: str
    impl: Callable[..., Any]
    fake: Callable[..., Any]
    mutates: tuple[str, ...] = ()
    backward: Callable[..., Any] | None = None
    setup_context: Callable[..., Any] | None = None


#: every op registered in this process, by qualified name (torch allows each name once)
_REGISTERED: dict[str, Any] = {}


#: memory kept per (what, device, stream) for the launches on that stream (split workspaces,
#: grouped_mm's pre-pass maps), and CUDA graph captures' own by (what, device, stream, capture
#: id): the newest few (a dropped one stays its graph's: the graph's pool keeps the memory)
_STREAM_MEMORY: dict[tuple[Hashable, int, int], Any] = {}
_CAPTURED: dict[tuple[Hashable, int, int, int], Any] = {}
_CAPTURED_KEPT = 16
_STREAM_MEMORY_LOCK = threading.Lock()
M = TypeVar("M")


def capture_id(stream: int) -> int | None:
    """The id of the CUDA graph capture under way on ``stream`` (the driver's
    ``cuStreamGetCaptureInfo``), None where the driver does not say."""
    import ctypes

    from pipeline_core_nvidia_h100.tma import TensorMapError, _libcuda

    status, cid = ctypes.c_int(), ctypes.c_uint64()
    try:
        rc = _libcuda().cuStreamGetCaptureInfo(ctypes.c_void_p(stream), ctypes.byref(status),
                                               ctypes.byref(cid))
    except (AttributeError, TensorMapError):
        return None
    return int(cid.value) if rc == 0 and status.value == 1 else None


def stream_memory(what: Hashable, device: int, stream: int,
                  make: Callable[[Any, Any], M]) -> M:
    """Memory the launches on (device, stream) use beside their operands, ``make(torch,
    torch_device)`` on the stream's first call and kept: calls on one stream run in order, so
    they share it; a stream of its own gets its own.

    While a CUDA graph is being captured on a stream that has none (``torch.cuda.graph``'s own
    capture stream, which no eager call ever ran on), the capture's own: made from the graph's
    private pool (what ``make`` writes, a zero fill, captured with it) and shared by the
    capture's later calls (found by the driver's capture id; one fill a replay, not one a call:
    a decode step at batch 1 is 17 us, a fill's launch about 2), kept no longer than the graph
    needs (the graph owns that memory).  Why not refuse or run unsplit there, as the first cuts
    did: a serving loop captures its steps exactly so, and batch-1 decoding unsplit fills 8 of
    132 SMs (0.49 TB/s where split it reads 4).  So a call's packed arguments must be keyed by
    the memory's address (a capture's is another), never kept across calls as the stream's."""
    key = (what, device, stream)
    found = _STREAM_MEMORY.get(key)
    if found is not None:
        return found
    torch = _require("torch")
    dev = torch.device("cuda", device)
    if not torch.cuda.is_current_stream_capturing():
        made = make(torch, dev)
        with _STREAM_MEMORY_LOCK:
            return _STREAM_MEMORY.setdefault(key, made)
    cid = capture_id(stream)
    if cid is None:  # no id to share by: one a call
        return make(torch, dev)
    ckey = (what, device, stream, cid)
    with _STREAM_MEMORY_LOCK:
        if ckey not in _CAPTURED:
            while len(_CAPTURED) >= _CAPTURED_KEPT:
                _CAPTURED.pop(next(iter(_CAPTURED)))
            _CAPTURED[ckey] = make(torch, dev)
        return _CAPTURED[ckey]


def split_workspace(device: int, stream: int, slices: int,
                    slice_elems: int) -> tuple[Any, Any]:
    """A cross-CTA reduction's fp32 workspace (``slices`` slices of ``slice_elems``) and its
    ``slices`` int32 counters on (device, stream) (:func:`stream_memory`: kept per stream, or a
    CUDA graph capture's own): the counters start at zero and every launch of a proven
    reduction leaves them so (its last arriver resets its tile's), so launches on one stream
    reuse them in order (the split-K GEMM, split-KV decoding)."""
    return stream_memory(("split", slices, slice_elems), device, stream, lambda torch, dev: (
        torch.empty(slices * slice_elems, dtype=torch.float32, device=dev),
        torch.zeros(slices, dtype=torch.int32, device=dev)))


class HostCall(Generic[P, B]):
    """One family's call layer: the plugin host its schedule compiles on, its kernels, recipe
    and packed-argument caches, its launch and its custom ops.

    ``schedule``: the schedule the family's kernels compile; ``plugins``: the plugin modules
    that register it (loaded by name from a checkout without entry points); ``build(key)``: the
    kernel of a key (:meth:`compile`, emit, :func:`load_kernel`); ``pack(recipe, kernels,
    tensors)``: one :class:`Launch` per kernel of the recipe; ``ops``: the family's custom
    ops, registered on the first :meth:`ops`."""

    def __init__(self, *, schedule: str, plugins: Sequence[str], build: Callable[[Any], B],
                 pack: Callable[[Recipe[P], tuple[B, ...], tuple[Any, ...]],
                                tuple[Launch, ...]],
                 ops: Callable[[], Sequence[Op]] = tuple) -> None:
        self.schedule, self.plugins = schedule, tuple(plugins)
        self.lock = threading.Lock()
        self.recipes: Bounded[Recipe[P]] = Bounded(RECIPE_CACHE_SIZE)
        self.args: Bounded[tuple[Launch, ...]] = Bounded(ARGS_CACHE_SIZE)
        #: the argument descriptions the op path's checks passed (:meth:`_check_once`)
        self.checked: Bounded[bool] = Bounded(RECIPE_CACHE_SIZE)
        self.kernels: KernelTable[B] = KernelTable(build, self.lock)
        #: the launch (launch_cache.launch; a test's stand-in records instead)
        self.launcher: Callable[..., None] = launch
        self._pack, self._ops = pack, ops
        self._namespace: Any = None
        #: the eager autograd twins of the differentiable ops, by name (filled by ops())
        self._functions: dict[str, Any] = {}

    def host(self) -> Any:
        """The installed plugins, or, from a checkout on PYTHONPATH (no entry points), the
        family's plugins loaded by module."""
        from pipeline_core.plugin_api import PluginHost, default_host

        host = default_host()
        if self.schedule in host.schedules:
            return host
        return PluginHost(extra_modules=list(self.plugins))

    def compile(self, params: dict[str, str], stages: int) -> CompiledSchedule:
        """The family's schedule compiled (and proven) on the H100 with ``-p params`` and
        ``-T stages``."""
        from pipeline_core.plugin_api import compile_named

        return compile_named(self.schedule, target="h100", params=params,
                             target_args={"stages": str(stages)}, host=self.host())

    def load(self, compiled: CompiledSchedule, source: str, name: str, device: int) -> Built:
        """Kernel ``name`` of ``source`` (emitted from ``compiled``) loaded on ``device`` with
        the block and shared memory its declared geometry launches with (``threads``,
        ``smem_bytes``): a family whose packer reads nothing more needs no build of its own."""
        g = compiled.plan.launch.geometry if compiled.plan.launch is not None else None
        if g is None or not hasattr(g, "smem_bytes") or not hasattr(g, "threads"):
            raise ValueError(f"schedule {compiled.schedule_name}: its kernel launch declares no "
                             "geometry with threads and smem_bytes; give its kernel_launch() one")
        return Built(kernel=load_kernel(source, name, device=device, smem=g.smem_bytes),
                     smem=g.smem_bytes, threads=g.threads)

    def recipe(self, first: Any, key: tuple[Any, ...], plan: Callable[[int], P],
               kernels: Callable[[P, int], tuple[Hashable, ...]]) -> Recipe[P]:
        """The recipe of a call whose arguments ``key`` describes (``launch_cache.describe``),
        on ``first``'s device and torch's current stream there: kept, or checked and planned
        (``plan(device)``) on the first call of the description, its kernels named by
        ``kernels(plan, device)``."""
        import torch  # type: ignore[import-not-found, unused-ignore]

        index = first.device.index
        device = index if index is not None else torch.cuda.current_device()
        stream = current_stream(torch, device)
        found = self.recipes.get((*key, stream))
        if found is None:
            p = plan(device)
            found = self.recipes.put((*key, stream), Recipe(
                plan=p, device=device, stream=stream, kernels=kernels(p, device)))
        return found

    def launch(self, r: Recipe[P], key: Hashable, tensors: tuple[Any, ...],
               late: Any = None) -> None:
        """Launch recipe ``r``'s kernels on ``tensors`` (and ``late``'s address, packed per
        call; a tuple of them, each packed per call, where the kernels take several late values:
        ``KernelSignature.pack_around`` of several names; ``None`` in it packs a null pointer,
        an output the call does not want) on its stream.  ``key``: the recipe and every
        address the packed arguments hold (and the kernels, where they may be swapped), which
        the family names; the arguments are packed once per key and kept."""
        found = self.args.get(key)
        if found is None:
            kernels = tuple(self.kernels.kernel(k) for k in r.kernels)
            found = self.args.put(key, self._pack(r, kernels, tensors))
        for p in found:
            self.launcher(p.kernel, r.device, r.stream, p.grid, p.block,
                          p.args if p.late is None
                          else p.args.around(p.late(*map(_address, late)), p.tail)
                          if type(late) is tuple
                          else p.args.around((p.late(late.data_ptr()),), p.tail), p.smem)

    def call(self, op: str, run: Callable[..., Any], check: Callable[..., Any],
             tensors: Sequence[Any], *args: Any,
             op_args: Callable[[], tuple[Any, ...]] | None = None) -> Any:
        """One call of the family's custom op ``op`` (its name in the family's namespace) on
        ``tensors`` and ``args``: plain CUDA tensors needing no gradient go straight to ``run``
        (``launch_cache.eager``: no dispatch); plain ones needing one, to the op's eager
        autograd twin (:func:`autograd_function`), where the op has a backward; anything else
        (torch.compile's tracing, a dispatch mode, a tensor subclass) through the op
        (registered first, so torch.compile traces it).  Outside tracing ``check`` refuses bad
        arguments in one line first (where torch.compile traces, the op's fake runs the
        checks instead: dynamo stops at them).  ``op_args``: the op's arguments after the
        tensors where its schema spells ``args`` otherwise (a schema has no bool-or-str), made
        after the checks."""
        import torch  # type: ignore[import-not-found, unused-ignore]  # traceable (see ops)

        ops = self.ops()
        own = plain(torch, *tensors)  # launch_cache.eager's first half, asked once
        if own and not needs_gradient(torch, *tensors):
            return run(*tensors, *args)
        # traced (dynamo, or a dispatch mode: AOTAutograd traces an op's backward, a call of
        # this layer, under its fake mode with is_compiling() False) the op's fake runs the
        # checks; a fake tensor has no address for the description's alignment (session 26:
        # torch.compile of a backward failed on it since session 24's checks-once)
        if not torch.compiler.is_compiling() and not torch._C._len_torch_dispatch_stack():
            self._check_once(op, check, tensors, args)
        rest = args if op_args is None else op_args()
        function = self._functions.get(op) if own else None
        if function is not None:
            return function.apply(*tensors, *rest)
        return getattr(ops, op)(*tensors, *rest)

    def _check_once(self, op: str, check: Callable[..., Any], tensors: Sequence[Any],
                    args: tuple[Any, ...]) -> None:
        """``check(*tensors, *args)``, once per description of them (each tensor's
        ``launch_cache.describe`` and whether it requires grad, the other arguments): what the
        checks read, as the recipes' cache trusts.  Why once: a family's checks are its whole
        plan (attention's cost the host about 250 us a call, run on every call needing a
        gradient, against 40 for the launch); unhashable arguments are checked every call."""
        try:
            key = (op, *((describe(t), getattr(t, "requires_grad", False)) for t in tensors),
                   *args)
            seen = self.checked.get(key)
        except TypeError:
            key, seen = None, None
        if seen is None:
            check(*tensors, *args)
            if key is not None:
                self.checked.put(key, True)

    def register_if_torch_imported(self) -> None:
        """Register the family's ops now where the process imported torch already (a family's
        call module runs this as it finishes importing).  Why: dynamo cannot trace the
        registration (its attrs records' constructors stop it), so a process whose first call
        of the family is inside ``torch.compile(fullgraph=True)`` failed there (session 26);
        a process that imports torch later still registers on first use."""
        if "torch" in sys.modules:
            self.ops()

    def ops(self) -> Any:
        """``torch.ops``'s namespace of the family's ops, registered on first use (torch
        imported only then), or as the family's call module is imported where torch is
        already (:meth:`register_if_torch_imported`)."""
        if self._namespace is None:
            # a plain import (not _require's importlib): what torch.compile can trace, where a
            # family's first call is traced
            import torch  # type: ignore[import-not-found, unused-ignore]

            ops = tuple(self._ops())
            for op in ops:
                register_op(op)
            self._functions = {op.name.split("::")[1]: _REGISTERED[op.name][2] for op in ops
                               if _REGISTERED[op.name][2] is not None}
            self._namespace = getattr(torch.ops, _namespace(ops))
        return self._namespace


def _address(t: Any) -> int:
    """A late tensor's address, 0 (a null pointer) for None."""
    return 0 if t is None else int(t.data_ptr())


def _namespace(ops: Sequence[Op]) -> str:
    spaces = {op.name.split("::")[0] for op in ops}
    if len(spaces) != 1:
        raise ValueError(f"a family's ops share one namespace; these name {sorted(spaces)}: "
                         "give them one")
    return spaces.pop()


def register_op(op: Op) -> Any:
    """``op`` registered as a torch custom op with its fake and, if it has one, its backward
    (and then its eager twin, :func:`autograd_function`); once per process (a second op of the
    same name is refused)."""
    found = _REGISTERED.get(op.name)
    if found is not None:
        if found[0] != op:
            raise ValueError(f"custom op {op.name}: registered already, by another family's "
                             "call; give this one another name")
        return found[1]
    import torch  # type: ignore[import-not-found, unused-ignore]  # traceable (see ops)

    registered = torch.library.custom_op(op.name, op.impl, mutates_args=op.mutates,
                                         schema=op.schema)
    registered.register_fake(op.fake)
    function = None
    if op.backward is not None:
        registered.register_autograd(op.backward, setup_context=op.setup_context)
        if op.setup_context is not None:  # (a Function's forward without ctx needs one)
            function = autograd_function(torch, op)
    _REGISTERED[op.name] = (op, registered, function)
    return registered


def autograd_function(torch: Any, op: Op) -> Any:
    """A differentiable op's eager twin: a ``torch.autograd.Function`` whose forward runs the
    op's implementation, then the op's ``setup_context`` on the Function's context, and whose
    backward is the op's own, so both paths run one body.

    Why a twin: on an H200 (torch 2.11) a causal training step of attention at D 128 S 1k
    (forward, then backward) cost the calling thread 307 us of CPU through the custom ops
    (their dispatch, torch.library's autograd wrapper) against 167 through this twin
    (SDPA-cuDNN's: 191), and where the host is slower than the GPU it sets the pace
    (benchmarks/results/attention_step_host_s24_h200.jsonl).  Why the context is set up inside
    the forward rather than through the Function's own ``setup_context``: with that defined,
    ``Function.apply`` binds its arguments through ``inspect.signature`` on every call.  The op
    stays what torch.compile traces, and what takes a dispatch mode or a tensor subclass."""
    impl, setup, backward = op.impl, op.setup_context, op.backward
    if setup is None or backward is None:
        raise ValueError(f"custom op {op.name}: an eager twin needs the op's backward and "
                         "setup_context; give it both")

    def forward(ctx: Any, *args: Any) -> Any:
        out = impl(*args)
        setup(ctx, args, out)
        return out

    return type(op.name.replace("::", "_"), (torch.autograd.Function,), {
        "__doc__": f"{op.name}'s eager autograd twin (kit.call.autograd_function).",
        "forward": staticmethod(forward), "backward": staticmethod(backward)})


def load_kernel(source: str, name: str, *, device: int, smem: int,
                options: tuple[str, ...] = BUILD_OPTIONS,
                announce: Callable[[str], None] | None = None) -> Any:
    """Kernel ``name`` of ``source`` loaded on ``device``, its cubin read from the disk cache
    or built with nvcc (``announce`` told first), or compiled with NVRTC without nvcc; its
    dynamic shared memory limit raised to ``smem``."""
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.runtime import ARCH, KernelBuilder

    cp = _require("cupy")
    with cp.cuda.Device(device):
        path = cubin_path(source, name, options, ARCH, announce)
        if path is not None:
            kernel = cp.RawModule(path=str(path)).get_function(name)
        else:
            kernel = KernelBuilder(options).compile(source, name)
        KernelBuilder.set_max_dynamic_shared(kernel, smem)
    return kernel


_SMS: dict[int, int] = {}


def sm_count(device: int) -> int:
    """The device's SM count (a persistent grid's size), asked of torch once per device."""
    found = _SMS.get(device)
    if found is None:
        found = _SMS[device] = _require("torch").cuda.get_device_properties(
            device).multi_processor_count
    return found


def tma_readable(t: Any) -> bool:
    """Whether TMA can read tensor ``t`` (any rank) where it lies, through a tensor map of its
    own strides: unit-strided elements in the last dimension, every other dimension's stride a
    multiple of 16 bytes (the driver refuses any other, a dimension of one index's too), no
    two indices at one address (a broadcast's stride 0 or overlapping rows: the dimensions of
    more than one index, by stride, each past the last one's extent), the base 16-byte
    aligned.  A transposed or sliced view passes (its strides need not increase).  What fails
    is copied (:func:`tma_copy`), never refused: torch takes it."""
    shape, elem = tuple(t.shape), t.element_size()
    strides = tuple(t.stride(i) for i in range(len(shape)))
    if strides[-1] != 1 or t.data_ptr() % 16 or any(s * elem % 16 for s in strides[:-1]):
        return False
    spans = sorted((s, n) for n, s in zip(shape[:-1], strides[:-1]) if n > 1)
    extent = shape[-1]  # elements the dimensions inside the next one cover, the last's first
    for s, n in spans:
        if s < extent:
            return False
        extent = s * n
    return True


def tma_copy(t: Any) -> Any:
    """``t`` (any rank) copied into a dense layout TMA can read: its last dimension padded to
    16 bytes (the pad never read: a tensor map is of ``t``'s sizes), the others in order."""
    *outer, cols = t.shape
    per = 16 // t.element_size()
    return t.new_empty(*outer, -(-cols // per) * per)[..., :cols].copy_(t)


_MAPS: Bounded[Any] = Bounded(MAP_CACHE_SIZE)


def _map_dtype(dtype: str) -> int:
    """The driver's element type of the calls' ``dtype`` name (``bf16``, ``fp16``, ``fp32``;
    fp8 ``e4m3`` travels as bytes: TMA copies, never converts)."""
    from pipeline_core_nvidia_h100.tma import (DTYPE_BFLOAT16, DTYPE_FLOAT16, DTYPE_FLOAT32,
                                               DTYPE_UINT8)

    return {"bf16": DTYPE_BFLOAT16, "fp16": DTYPE_FLOAT16, "fp32": DTYPE_FLOAT32,
            "e4m3": DTYPE_UINT8}[dtype]


def tensor_map(ptr: int, rows: int, cols: int, box_rows: int, box_cols: int, dtype: str, *,
               stride: int | None = None, batch: int = 1, batch_stride: int = 0,
               swizzle: bool = True) -> Any:
    """The TMA tensor map of a [rows, cols] array of ``dtype`` (``bf16``, ``fp16``, ``fp32``
    or ``e4m3``) at ``ptr`` (tma.encode_tiled_2d; ``swizzle``: boxes swizzled as wide as their
    rows, 128 or 64 bytes (tma.swizzle_of), else as in global memory), encoded once and kept:
    encoding is a driver call on the host."""
    key = (ptr, rows, cols, box_rows, box_cols, dtype, stride, batch, batch_stride, swizzle)
    found = _MAPS.get(key)
    if found is None:
        from pipeline_core_nvidia_h100.tma import (DTYPE_BYTES, SWIZZLE_NONE, encode_tiled_2d,
                                                   swizzle_of)

        kind = _map_dtype(dtype)
        found = _MAPS.put(key, encode_tiled_2d(
            ptr, rows, cols, box_rows, box_cols, stride=stride, dtype=kind, batch=batch,
            batch_stride=batch_stride,
            swizzle=swizzle_of(box_cols * DTYPE_BYTES[kind]) if swizzle else SWIZZLE_NONE))
    return found


def dense_strides(shape: Sequence[int], order: Sequence[int] | None = None) -> tuple[int, ...]:
    """The strides (elements, in ``shape``'s dimensions) of a dense tensor of ``shape`` laid
    out in ``order`` (outermost first; None: row-major): what a tensor map takes for a
    dimension of one index, and the layout a family allocates an output in."""
    order = range(len(shape)) if order is None else order
    out = [0] * len(shape)
    step = 1
    for i in reversed(tuple(order)):
        out[i] = step
        step *= int(shape[i])
    return tuple(out)


def strided_tensor_map(ptr: int, shape: Sequence[int], strides: Sequence[int],
                       box: Sequence[int], dtype: str, *, swizzle: bool = True) -> Any:
    """The TMA tensor map of an array of ``dtype`` at ``ptr`` with torch's ``shape`` and
    ``strides`` (elements, outermost first, the last dimension unit-strided: a tensor
    :func:`tma_readable` passes), read in boxes of ``box`` elements per dimension (outermost
    first), encoded once and kept (tma.encode_tiled).  A dimension of one index takes the
    stride of a dense layout, which the driver accepts whatever the tensor's says (only index
    0 is read).  Any order of strides: a [B, S, H, D] tensor seen as [B, H, S, D] (attention's
    q as models hold it) is read in place, its boxes (1, 1, rows, 64) at (b, h, s, d)."""
    from pipeline_core_nvidia_h100.tma import (DTYPE_BYTES, SWIZZLE_128B, SWIZZLE_NONE,
                                               encode_tiled)

    kind = _map_dtype(dtype)
    elem = DTYPE_BYTES[kind]
    taken = [s if n > 1 else d for n, s, d in zip(shape, strides, dense_strides(shape))]
    key = ("strided", ptr, tuple(shape), tuple(taken), tuple(box), dtype, swizzle)
    found = _MAPS.get(key)
    if found is None:
        found = _MAPS.put(key, encode_tiled(
            ptr, tuple(reversed(shape)), tuple(s * elem for s in reversed(taken[:-1])),
            tuple(reversed(box)), dtype=kind, swizzle=SWIZZLE_128B if swizzle else SWIZZLE_NONE))
    return found

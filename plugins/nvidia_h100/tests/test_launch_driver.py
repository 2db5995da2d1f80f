"""The eager launch's driver path (launch_cache.launch): packed arguments go to cuLaunchKernel as
a kept parameter array, for the kernel objects the kit really loads (CuPy's ``RawKernel``, whose
``CUfunction`` sits on its ``kernel``), and a late call's changing slots are rewritten before
its launch.  A stand-in CuPy records each launch and reads the parameter array's bytes at that
moment, which is what the driver copies."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from pipeline_core_nvidia_h100 import launch_cache
from pipeline_core_nvidia_h100.launch_cache import (DriverParams, PackedArgs, function_handle,
                                                    launch)

MAP = np.dtype([("opaque", np.uint64, (16,))], align=True)  # a tensor map's 128 bytes


def _bytes_at(params: DriverParams) -> list[bytes]:
    """Each slot's bytes as the driver reads them: through the pointer array's addresses."""
    return [ctypes.string_at(params.pointers[i], params.kept[i].nbytes)
            for i in range(len(params.kept))]


class FakeCupy:
    """What launch() asks of CuPy: the current device and the driver's launch (recorded with
    the bytes each parameter holds at that moment)."""

    def __init__(self) -> None:
        self.launched: list[tuple] = []
        driver = types.SimpleNamespace(launchKernel=self._launch)
        runtime = types.SimpleNamespace(getDevice=lambda: 0)
        self.cuda = types.SimpleNamespace(driver=driver, runtime=runtime,
                                          ExternalStream=lambda handle: ("stream", handle))

    def _launch(self, handle, gx, gy, gz, bx, by, bz, smem, stream, address, extra):
        pointers = (ctypes.c_void_p * len(self.sizes)).from_address(address)
        seen = [ctypes.string_at(pointers[i], n) for i, n in enumerate(self.sizes)]
        self.launched.append((handle, (gx, gy, gz), (bx, by, bz), smem, stream, seen))


class RawKernel:
    """CuPy's RawKernel as the kit holds it: no ``ptr`` of its own, its Function's on ``kernel``;
    called directly it is CuPy's converting path."""

    def __init__(self, ptr: int) -> None:
        self.kernel = types.SimpleNamespace(ptr=ptr)
        self.called: list[tuple] = []

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        self.called.append((grid, block, tuple(args)))


@pytest.fixture
def cupy(monkeypatch):
    fake = FakeCupy()
    monkeypatch.setattr(launch_cache, "_require", lambda name: fake if name == "cupy" else np)
    monkeypatch.setattr(launch_cache, "_STREAMS", {})
    return fake


def test_the_handle_is_found_on_the_kernel_objects_cupy_gives():
    assert function_handle(types.SimpleNamespace(ptr=77)) == 77  # a Function
    assert function_handle(RawKernel(88)) == 88  # RawModule.get_function's RawKernel
    assert function_handle(object()) is None  # a stand-in: CuPy's path
    assert function_handle(RawKernel(0)) is None  # no function loaded


def test_the_parameter_array_points_at_each_arguments_bytes():
    tmap = np.zeros((), dtype=MAP)[()]
    tmap["opaque"][:] = np.arange(16, dtype=np.uint64)
    args = (np.uint64(0xDEADBEEF00), np.int32(-5), tmap, np.float32(1.5))
    params = DriverParams.of(args)
    assert params is not None
    assert _bytes_at(params) == [np.array(a).tobytes() for a in args]
    assert DriverParams.of((np.int32(1), 3)) is None  # a Python int: CuPy converts it


def test_a_raw_kernel_launches_through_the_driver_with_its_kept_array(cupy):
    kernel = RawKernel(0x1234)
    args = PackedArgs((np.uint64(4096), np.int32(7)))
    cupy.sizes = (8, 4)
    for _ in range(2):
        launch(kernel, 0, 99, (132,), (384,), args, 1000)
    assert kernel.called == []  # never CuPy's converting path
    assert cupy.launched[0] == (0x1234, (132, 1, 1), (384, 1, 1), 1000, 99,
                                [np.uint64(4096).tobytes(), np.int32(7).tobytes()])
    assert cupy.launched[1] == cupy.launched[0]
    assert args.driver == (0x1234, launch_cache._driver(kernel, args)[1])  # kept on the args


def test_a_late_call_rewrites_its_own_slots_before_each_launch(cupy):
    kernel = RawKernel(0x99)
    template = PackedArgs((np.uint64(4096),))
    cupy.sizes = (8, 8, 4)
    for out in (111, 222, 333):
        launch(kernel, 0, 1, (2,), (128,), template.around((np.uint64(out),), (np.int32(9),)),
               0)
    outs = [int(np.frombuffer(seen[1], np.uint64)[0]) for *_, seen in cupy.launched]
    assert outs == [111, 222, 333]
    assert all(seen[0] == np.uint64(4096).tobytes() and seen[2] == np.int32(9).tobytes()
               for *_, seen in cupy.launched)
    assert kernel.called == []


def test_a_stand_in_kernel_and_unpackable_arguments_take_cupys_path(cupy):
    standin = RawKernel(0)
    launch(standin, 0, 1, (1,), (32,), PackedArgs((np.int32(1),)), 0)
    mixed = RawKernel(5)
    launch(mixed, 0, 1, (1,), (32,), PackedArgs((np.int32(1), "not a value")), 0)
    plain = RawKernel(6)
    launch(plain, 0, 1, (1,), (32,), (np.int32(1),), 0)  # not packed by the call layer
    assert [len(k.called) for k in (standin, mixed, plain)] == [1, 1, 1]
    assert cupy.launched == []


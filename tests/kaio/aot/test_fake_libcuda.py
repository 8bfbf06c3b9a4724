"""The recording libcuda refuses what the driver refuses (each rule the equivalence tests lean
on, planted one at a time): a fake more lenient than the driver would pass launchers that fail
on a GPU."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_cuda import build_fake, run  # noqa: E402

CHECKS = r"""
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
V, P = ctypes.c_void_p, ctypes.POINTER
def code(name, *args):
    return getattr(cu, name)(*args)
ptx = b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(\n.param .u64 k_0,\n.param .u32 k_1\n)\n{ ret; }\0"
module, function, ctx = V(), V(), V()
out = {}
out["alloc_without_context"] = code("cuMemAlloc_v2", ctypes.byref(ctypes.c_uint64()), ctypes.c_size_t(64))
out["load_without_context"] = code("cuModuleLoadData", ctypes.byref(module), ptx)
code("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
code("cuCtxSetCurrent", ctx)
out["load"] = code("cuModuleLoadData", ctypes.byref(module), ptx)
out["missing_entry"] = code("cuModuleGetFunction", ctypes.byref(function), module, b"nope")
out["entry"] = code("cuModuleGetFunction", ctypes.byref(function), module, b"k")
a, n = ctypes.c_uint64(4096), ctypes.c_uint32(7)
params = (V * 2)(ctypes.cast(ctypes.byref(a), V), ctypes.cast(ctypes.byref(n), V))
def launch(block=(128, 1, 1), grid=(1, 1, 1), shared=0, p=params):
    return cu.cuLaunchKernel(function, *[ctypes.c_uint(g) for g in grid], *[ctypes.c_uint(b) for b in block], ctypes.c_uint(shared), V(), p, V())
out["launch"] = launch()
out["block_2048"] = launch(block=(2048, 1, 1))
out["block_threads"] = launch(block=(64, 32, 1))
out["grid_zero"] = launch(grid=(0, 1, 1))
out["grid_y"] = launch(grid=(1, 65536, 1))
out["no_params"] = launch(p=None)
out["shared_without_optin"] = launch(shared=64 * 1024)
out["optin_beyond_limit"] = cu.cuFuncSetAttribute(function, 8, 300 * 1024)
out["optin"] = cu.cuFuncSetAttribute(function, 8, 64 * 1024)
out["shared_with_optin"] = launch(shared=64 * 1024)
tmap = (ctypes.c_uint64 * 16)()
def encode(base=4096, stride=256, box0=64, swizzle=3, dim0=64):
    dims, strides = (ctypes.c_uint64 * 2)(dim0, 64), (ctypes.c_uint64 * 1)(stride)
    box, steps = (ctypes.c_uint32 * 2)(box0, 64), (ctypes.c_uint32 * 2)(1, 1)
    return cu.cuTensorMapEncodeTiled(tmap, 6, 2, V(base), dims, strides, box, steps, 0, swizzle, 2, 0)
out["encode"] = encode()
first = bytes(tmap)
encode()
out["encode_deterministic"] = int(bytes(tmap) != first)
out["encode_misaligned_base"] = encode(base=4104)
out["encode_stride_8"] = encode(stride=8)
out["encode_inner_box_beyond_swizzle"] = encode(box0=128)
out["encode_inner_box_bytes"] = encode(box0=60, swizzle=0)
out["encode_dim_zero"] = encode(dim0=0)
out["cubin_refused"] = code("cuModuleLoadData", ctypes.byref(V()), b"\x7fELF\x02\x01\x01" + bytes(64))
out["sm90a_ptx_on_sm80"] = code("cuModuleLoadData", ctypes.byref(V()), ptx.replace(b"sm_80", b"sm_90a"))
out["newer_ptx"] = code("cuModuleLoadData", ctypes.byref(V()), ptx.replace(b"sm_80", b"sm_86"))
print(out)
"""

EXPECTED = {  # CUDA_ERROR_INVALID_VALUE 1, INVALID_CONTEXT 201, NO_BINARY_FOR_GPU 209, NOT_FOUND 500
    "alloc_without_context": 201, "load_without_context": 201, "load": 0, "missing_entry": 500, "entry": 0,
    "launch": 0, "block_2048": 1, "block_threads": 1, "grid_zero": 1, "grid_y": 1, "no_params": 1,
    "shared_without_optin": 1, "optin_beyond_limit": 1, "optin": 0, "shared_with_optin": 0,
    "encode": 0, "encode_deterministic": 0, "encode_misaligned_base": 1, "encode_stride_8": 1,
    "encode_inner_box_beyond_swizzle": 1, "encode_inner_box_bytes": 1, "encode_dim_zero": 1,
    "cubin_refused": 209, "sm90a_ptx_on_sm80": 209, "newer_ptx": 209,
}  # fmt: skip


def test_fake_refuses_what_the_driver_refuses(tmp_path):
    fake = build_fake(tmp_path / "fake")
    out = run(CHECKS, fake, tmp_path / "log", 80, FAKE_CUDA_REJECT_CUBIN="1").stdout
    assert eval(out) == EXPECTED  # noqa: S307 (the dict the subprocess printed)


def test_launch_log_holds_each_parameters_bytes(tmp_path):
    fake = build_fake(tmp_path / "fake")
    run(CHECKS, fake, tmp_path / "log", 80)
    launches = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("launch ")]
    assert launches[0] == "launch k grid=1,1,1 block=128,1,1 shared=0 stream=0 params=0010000000000000,07000000"
    assert len(launches) == 2  # the plain launch and the one with the opt-in; every refused one is absent

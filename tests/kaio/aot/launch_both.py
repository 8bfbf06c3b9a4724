"""Run in a subprocess on the fake libcuda: kaio launches a kernel, then the exported C launcher
launches it with the same arguments; the fake's log holds both, split by a `mark` line.

    python launch_both.py CASE LIBRARY MANIFEST LOG
"""

import ctypes
import json
import sys

import numpy as np

import aot_kernels
import kaio
from kaio.ops_library import matmul

C_TYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
           "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16}  # fmt: skip


def main(case: str, library: str, manifest_path: str, log: str) -> None:
    dev = kaio.Device(0)
    rng = np.random.default_rng(7)
    if case == "saxpy":
        n = 1000
        x, y = dev.alloc_from(rng.random(n, dtype=np.float32)), dev.alloc_from(rng.random(n, dtype=np.float32))
        aot_kernels.saxpy[kaio.cdiv(n, 128)](x, y, 1.5, n)
        args, grid = [x.ptr, y.ptr, 1.5, n], None
    elif case == "bias_gelu":
        rows, cols = 40, 192
        x, b = dev.alloc_from(rng.random((rows, cols), dtype=np.float32)), dev.alloc_from(rng.random(cols, dtype=np.float32))
        y = dev.zeros((rows, cols))
        aot_kernels.bias_gelu[(kaio.cdiv(rows, 16), kaio.cdiv(cols, 64))](x, b, y, rows, cols)
        args, grid = [x.ptr, b.ptr, y.ptr, rows, cols], None
    else:  # the library matmul: a (m x k) @ b (k x n), f16 in, f32 out, alpha/beta terms
        m, n, k = 256, 512, 128
        a = dev.alloc_from(rng.standard_normal((m, k)).astype(np.float16))
        b = dev.alloc_from(rng.standard_normal((k, n)).astype(np.float16))
        c = dev.zeros((m, n))
        matmul.run(a, b, out=c, alpha=1.5, beta=0.5)
        args, grid = [a.ptr, b.ptr, c.ptr, c.ptr, m, n, k, 1.5, 0.5], None  # no bias: C's address, as kaio passes
    with open(log, "a") as f:
        f.write("mark\n")
    manifest = json.loads(open(manifest_path).read())
    launch = getattr(ctypes.CDLL(library), manifest["launch"])
    params = manifest["variants"][0]["params"]
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint64 if p["array"] else C_TYPES[p["dtype"]] for p in params]
    result = launch(None, grid, *args)
    print("result", result)
    if result != 0:
        raise SystemExit(f"{manifest['launch']} returned {result}")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""The C launcher's recorded launch, run on kaio's simulator, computes the right result.

The launcher is called (on the recording libcuda) with the addresses of simulator buffers;
the module it loaded and the parameter bytes it passed then run on the simulator as recorded,
the tensor maps it encoded rebuilt in the simulator's format from the recorded arguments."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import kaio
from kaio.aot import export
from kaio.dtypes import BY_NAME
from kaio.ops_library import matmul

sys.path.insert(0, str(Path(__file__).parent))
import aot_kernels  # noqa: E402
from fake_cuda import build_fake, build_launcher, of_kind, parse, run  # noqa: E402

SWIZZLES = {"0": 0, "1": 32, "2": 64, "3": 128}  # CU_TENSOR_MAP_SWIZZLE_* -> span in bytes

CALL = """
import ctypes, kaio
kaio.Device(0).zeros(16)  # the context current
lib = ctypes.CDLL({library!r})
f = getattr(lib, {launch!r})
f.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + {types}
print(f(None, None, *{args!r}))
"""
CTYPES = {"f32": "ctypes.c_float", "i32": "ctypes.c_int32", "u32": "ctypes.c_uint32"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return build_fake(tmp_path_factory.mktemp("fake"))


def launch_recorded(dev, kernel, args, tmp_path, fake, arch, **options):
    """Export for ``arch``, call the C launcher with ``args`` (simulator addresses), replay the
    recorded launch on the simulator device ``dev``."""
    files = export(kernel, tmp_path / "export", arch=arch, cubin=False, **options)
    manifest = json.loads(next(p for p in files if p.suffix == ".json").read_text())
    library = build_launcher(tmp_path / "export", manifest["name"], fake)
    variant = manifest["variants"][0]
    types = "[" + ", ".join("ctypes.c_uint64" if p["array"] else CTYPES[p["dtype"]] for p in variant["params"]) + "]"
    log = tmp_path / "log"
    code = CALL.format(library=str(library), launch=manifest["launch"], types=types, args=list(args))
    assert run(code, fake, log, 90 if arch == "sm_90a" else 80).stdout.split() == ["0"]
    events = parse(log)
    (load,), (launch,) = of_kind(events, "load"), of_kind(events, "launch")
    module = dev._backend.load_module((log.parent / f"log.image{load.words[0]}.ptx").read_text())
    packed = [bytes.fromhex(h) for h in launch.fields["params"].split(",")]
    arrays = {p["name"]: p for p in variant["params"]}
    maps = of_kind(events, "encode")
    for i, (recipe, encode) in enumerate(zip(variant["tensor_maps"], maps, strict=True)):
        f = encode.fields
        dims = tuple(int(v) for v in f["dims"].split(","))
        strides = tuple(int(v) for v in f["strides"].split(",")) if f["strides"] else ()
        box = tuple(int(v) for v in f["box"].split(","))
        dtype = BY_NAME[arrays[recipe["array"]]["dtype"]]
        packed[len(variant["params"]) + i] = dev._backend.encode_tensor_map(
            dtype, int(f["base"], 16), dims, strides, box, SWIZZLES[f["swizzle"]])
    grid = tuple(int(v) for v in launch.fields["grid"].split(","))
    block = tuple(int(v) for v in launch.fields["block"].split(","))
    module.launch(launch.words[0], grid, block, packed, int(launch.fields["shared"]))


def test_tile_kernel(fake, tmp_path):
    dev = kaio.Device("sim")
    rng = np.random.default_rng()
    rows, cols = 37, 150
    x, bias = rng.standard_normal((rows, cols), dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
    bx, bb = dev.alloc_from(x), dev.alloc_from(bias)
    y = dev.alloc_from(np.full((rows, cols), np.nan, np.float32))  # poisoned
    launch_recorded(dev, aot_kernels.bias_gelu, [bx.ptr, bb.ptr, y.ptr, rows, cols], tmp_path, fake, "sm_80",
                    grid=aot_kernels.BIAS_GELU_GRID)  # fmt: skip
    h = (x + bias).astype(np.float64)
    expected = 0.5 * h * (1 + np.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(y.to_host(), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_library_matmul(fake, tmp_path, arch):
    dev = kaio.Device("sim", arch=arch)
    rng = np.random.default_rng()
    m, n, k = 128, 256, 64
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    da, db, dc = dev.alloc_from(a), dev.alloc_from(b), dev.alloc_from(c0)
    launch_recorded(dev, matmul, [da.ptr, db.ptr, dc.ptr, dc.ptr, m, n, k, 1.5, 0.5], tmp_path, fake, arch)
    expected = 1.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * c0
    np.testing.assert_allclose(dc.to_host(), expected, rtol=1e-3, atol=1e-3)

"""The exported C launcher against kaio's own launch, both on a recording libcuda: the same
modules, grid, block, shared memory, parameter bytes and tensor-map arguments; and the C
dispatcher's choices and error codes."""

import json
import sys
from pathlib import Path

import pytest

from kaio.aot import export
from kaio.ops_library import matmul

sys.path.insert(0, str(Path(__file__).parent))
import aot_kernels  # noqa: E402
from fake_cuda import build_fake, build_launcher, of_kind, parse, run  # noqa: E402

HERE = Path(__file__).parent
CASES = {  # name: (kernel, export options, fake compute capability)
    "saxpy": (aot_kernels.saxpy, dict(grid=("cdiv(n, 128)",)), 80),
    "bias_gelu": (aot_kernels.bias_gelu, dict(grid=aot_kernels.BIAS_GELU_GRID), 80),
    "matmul_sm80": (matmul, {}, 80),
    # the facts kaio's launch finds of m=256, n=512, k=128 (powers of two up to 64): with them the
    # Hopper kernel takes paneled tensor maps of C, as kaio's launch compiles it
    "matmul_sm90a": (matmul, dict(specialization=[("m", 64), ("n", 64), ("k", 64)]), 90),
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return build_fake(tmp_path_factory.mktemp("fake"))


def exported(tmp_path, kernel, fake, **options):
    files = export(kernel, tmp_path, arch=("sm_80", "sm_90a"), cubin=False, **options)
    manifest_path = next(p for p in files if p.suffix == ".json")
    manifest = json.loads(manifest_path.read_text())
    return manifest, manifest_path, build_launcher(tmp_path, manifest["name"], fake)


@pytest.mark.parametrize("case", CASES)
def test_c_launch_equals_kaio_launch(case, fake, tmp_path):
    kernel, options, cc = CASES[case]
    manifest, manifest_path, library = exported(tmp_path / "export", kernel, fake, **options)
    log = tmp_path / "log"
    run(f"import launch_both; launch_both.main({case!r}, {str(library)!r}, {str(manifest_path)!r}, "
        f"{str(log)!r})", fake, log, cc)  # fmt: skip
    events = parse(log)
    mark = next(i for i, e in enumerate(events) if e.kind == "mark")
    kaio_side, c_side = events[:mark], events[mark + 1:]
    assert not of_kind(c_side, "error"), [e.words for e in of_kind(c_side, "error")]
    for kind in ("launch", "encode", "attribute"):
        assert [e.words for e in of_kind(c_side, kind)] == [e.words for e in of_kind(kaio_side, kind)], kind
    (launch,) = of_kind(c_side, "launch")
    variant = next(v for v in manifest["variants"] if v["arch"] == ("sm_90a" if cc == 90 else "sm_80"))
    assert launch.words[0] == variant["entry"]
    assert launch.fields["block"] == ",".join(map(str, variant["block"]))
    assert int(launch.fields["shared"]) == variant["dynamic_shared_bytes"]
    assert len(of_kind(c_side, "encode")) == len(variant["tensor_maps"])
    if case == "saxpy":  # no argument facts: kaio's launch compiled the very PTX the export holds
        images = sorted(log.parent.glob("log.image*.ptx"))
        assert images[0].read_text() == images[1].read_text() == (tmp_path / "export" / variant["ptx"]).read_text()


DISPATCH = """
import ctypes, kaio
lib = ctypes.CDLL({library!r})
f = lib.bias_gelu_launch
f.restype = ctypes.c_int
f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32]
print("nocontext", f(None, None, 4096, 4096, 4096, 16, 64))
dev = kaio.Device(0)
x = dev.zeros(64 * 64)
p = x.ptr
print("fast", f(None, None, p, p, p, 16, 128))
print("general", f(None, None, p, p, p, 16, 100))
print("null", f(None, None, 0, p, p, 16, 64))
print("misaligned", f(None, None, p + 4, p, p, 16, 64))
print("empty", f(None, None, p, p, p, 0, 64))
grid = (ctypes.c_uint * 3)(3, 2, 1)
print("grid", f(None, ctypes.addressof(grid), p, p, p, 16, 64))
print("unload", lib.bias_gelu_unload())
"""


def test_dispatch_by_facts_and_error_codes(fake, tmp_path):
    manifest, _, library = exported(tmp_path / "export", aot_kernels.bias_gelu, fake, grid=aot_kernels.BIAS_GELU_GRID,
                                    specialization=[[("cols", 64)], None])  # fmt: skip
    entries = {v["index"]: v for v in manifest["variants"]}
    log = tmp_path / "log"
    out = run(DISPATCH.format(library=str(library)), fake, log, 80).stdout
    codes = dict(line.split() for line in out.splitlines())
    assert codes == {"nocontext": "201", "fast": "0", "general": "0", "null": "1", "misaligned": "1", "empty": "0",
                     "grid": "0", "unload": "0"}  # fmt: skip
    launches = of_kind(parse(log), "launch")
    assert [e.fields["grid"] for e in launches] == ["1,2,1", "1,2,1", "3,2,1"]  # empty: nothing launched
    loads = of_kind(parse(log), "load")
    images = [(log.parent / f"log.image{e.words[0]}.ptx").read_text() for e in loads]
    fast, general = (entries[i] for i in (2, 3))  # the sm_80 variants: with cols % 64 == 0, then without
    assert fast["facts"] == [["cols", 64]] and general["facts"] == []
    assert images == [(tmp_path / "export" / v["ptx"]).read_text() for v in (fast, general)]  # each loaded once
    assert len(of_kind(parse(log), "unload")) == 2


def test_no_variant_for_the_device(fake, tmp_path):
    _, _, library = exported(tmp_path / "export", aot_kernels.saxpy, fake, grid=("cdiv(n, 128)",))
    code = (f"import ctypes, kaio\nlib = ctypes.CDLL({str(library)!r})\nkaio.Device(0).zeros(16)  # the context current\nf = lib.saxpy_launch\n"
            "f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_float, ctypes.c_uint32]\n"
            "print(f(None, None, 4096, 4096, 1.0, 10))")  # fmt: skip
    assert run(code, fake, tmp_path / "log", 75).stdout.split() == ["209"]  # CUDA_ERROR_NO_BINARY_FOR_GPU


def test_cubin_first_then_ptx_when_the_driver_refuses_it(fake, tmp_path):
    from kaio.targets.ptx.toolchain import find_ptxas

    if find_ptxas() is None:
        pytest.skip("needs ptxas (nvidia-cuda-nvcc-cu12) to make a cubin")
    files = export(aot_kernels.saxpy, tmp_path / "export", arch="sm_80", grid=("cdiv(n, 128)",), cubin=True)
    assert any(p.suffix == ".cubin" for p in files)
    library = build_launcher(tmp_path / "export", "saxpy", fake)
    code = (f"import ctypes, kaio\nlib = ctypes.CDLL({str(library)!r})\ndev = kaio.Device(0)\nx = dev.zeros(16)\n"
            "f = lib.saxpy_launch\nf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, "
            "ctypes.c_float, ctypes.c_uint32]\nprint(f(None, None, x.ptr, x.ptr, 1.0, 10))")  # fmt: skip
    for reject, kinds in (("0", ["cubin"]), ("1", ["ptx"])):
        log = tmp_path / f"log{reject}"
        assert run(code, fake, log, 86, FAKE_CUDA_REJECT_CUBIN=reject).stdout.split() == ["0"]
        assert [e.fields["kind"] for e in of_kind(parse(log), "load")] == kinds

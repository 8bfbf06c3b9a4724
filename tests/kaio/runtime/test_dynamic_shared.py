"""Shared buffers beyond the 48 KiB a block may declare statically go to dynamic shared
memory: one ``.extern .shared`` array, each buffer at an aligned offset, the bytes recorded on
the compiled kernel (and in the disk cache) and passed by every launch."""

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.errors import KaioLaunchError
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.targets.ptx import toolchain

BIG = MatmulConfig((128, 128, 64), (2, 2), 4)  # a ring of 4 x (16 + 16) KiB
SMALL = MatmulConfig((64, 64, 32), (2, 2), 2)


def compiled(config: MatmulConfig, arch: str = "sm_80"):
    return kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), config), arch)


def test_buffers_beyond_48_kib_are_placed_in_dynamic_shared_memory():
    big = compiled(BIG)
    assert big.shared_bytes == 0 and big.dynamic_shared_bytes == 4 * 2 * 128 * 64 * 2
    assert ".extern .shared .align 128 .b8 matmul_dynamic_smem[];" in big.ptx
    assert "\t.shared" not in big.ptx


def test_kernels_within_48_kib_keep_static_buffers():
    small = compiled(SMALL)
    assert small.dynamic_shared_bytes == 0 and small.shared_bytes == 2 * 2 * 64 * 32 * 2
    assert ".extern" not in small.ptx


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_takes_dynamic_shared_memory_without_spills(arch):
    report = toolchain.assemble(compiled(BIG, arch).ptx, arch)
    assert report.spill_stores["matmul"] == 0 and report.spill_loads["matmul"] == 0


def test_a_matmul_with_128_kib_of_shared_memory_runs_on_the_simulator():
    rng = np.random.default_rng()
    a = rng.standard_normal((130, 200)).astype(np.float16)
    b = rng.standard_normal((200, 150)).astype(np.float16)
    dev = kaio.Device("sim")
    out = dev.alloc_from(np.full((130, 150), np.nan, np.float32))
    matmul(dev.alloc_from(a), dev.alloc_from(b), out, config=BIG)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = out.to_host()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def test_more_than_the_device_allows_is_a_launch_error_before_running():
    huge = MatmulConfig((256, 128, 64), (4, 2), 4)  # 4 x (32 + 16) KiB = 192 KiB > sm_80's 163 KiB
    dev = kaio.Device("sim")
    a = dev.alloc_from(np.zeros((16, 64), np.float16))
    out = dev.alloc_from(np.full((16, 64), 7.0, np.float32))
    with pytest.raises(KaioLaunchError, match=r"needs 196608 bytes of its own .* allows 166912"):
        matmul(a, dev.alloc_from(np.zeros((64, 64), np.float16)), out, config=huge)
    assert (out.to_host() == 7.0).all()


def test_the_disk_cache_keeps_the_dynamic_bytes(kaio_cache):
    from kaio import cache

    first = compiled(BIG)
    assert first.cache_key
    from_disk = cache.load(first.cache_key)
    assert from_disk is not None and from_disk.ptx == first.ptx
    assert from_disk.dynamic_shared_bytes == first.dynamic_shared_bytes > 0

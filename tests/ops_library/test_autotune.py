"""kaio.ops_library.autotune, the on-disk autotuning matmul and attention share: configs stored
as their fields and rebuilt checked, and matmul's "auto" wired through it (with a fake timer:
on the simulator, timings mean nothing)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import autotune as tuning
from kaio.ops_library.attention import AttentionConfig
from kaio.ops_library.matmul_config import MatmulConfig, candidates


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KAIO_CACHE", raising=False)
    return tmp_path


@pytest.mark.parametrize("config", [MatmulConfig(), MatmulConfig((64, 64, 32), (2, 2), 4, "pad", 4, False, 2, 128),
                                    AttentionConfig(), AttentionConfig(32, 16, 2, 2, 0)])  # fmt: skip
def test_a_config_survives_json(config):
    text = json.dumps(tuning.encode(config))
    assert tuning.decode(type(config), json.loads(text)) == config


@pytest.mark.parametrize(
    "data, message",
    [
        ({"block": [64, "64", 32]}, "block: expected a list of ints"),
        ({"tensor_cores": 1}, "tensor_cores: expected bool"),
        ({"stages": 2.0}, "stages: expected int"),
        ({"layout": None}, "layout: expected str"),
    ],
)
def test_a_mistyped_field_does_not_decode(data, message):
    fields = {**tuning.encode(MatmulConfig()), **data}
    with pytest.raises(ValueError, match=message):
        tuning.decode(MatmulConfig, fields)
    with pytest.raises(ValueError, match="lacks group"):
        tuning.decode(MatmulConfig, {k: v for k, v in tuning.encode(MatmulConfig()).items() if k != "group"})


def test_matmul_auto_is_tuned_once_and_stored(cache_dir, monkeypatch):
    import kaio.runtime.bench as bench_module
    from kaio.ops_library.matmul_autotune import autotune
    from kaio.ops_library.operands import Operands

    dev = kaio.Device("sim")
    a = dev.alloc_from(np.zeros((100, 64), np.float16))
    b = dev.alloc_from(np.zeros((64, 80), np.float16))
    ops = Operands("matmul", a, b, device=dev)
    oa, ob = ops.take("a", a), ops.take("b", b)
    align = (8, 8, 2)
    pool = [c for c in candidates(True, align, 2, (100, 80, 64), dev.sm_count) if c.shared_bytes(2) <= dev.shared_memory_per_block_optin]
    times = list(np.random.default_rng().permutation(len(pool)) + 1.0)
    timed = iter(times)
    monkeypatch.setattr(bench_module, "bench", lambda fn, **kw: SimpleNamespace(median=next(timed)))
    best = autotune(None, oa, ob, 100, 80, 64, dtypes.f32, align, True, dev)
    assert best == pool[int(np.argmin(times))]
    (key, entry), = json.loads((cache_dir / "autotune" / "matmul.json").read_text()).items()
    assert key == f"{dev.name}|sm_{dev.sm}|{dev.compile_arch}|f16->f32|align(8, 8, 2)|128x128x64"
    assert entry["median_ms"] == {c.key(): t for c, t in zip(pool, times, strict=True)}

    def refuse(fn, **kw):
        raise AssertionError("timed although a winner is stored")

    monkeypatch.setattr(bench_module, "bench", refuse)
    assert autotune(None, oa, ob, 120, 70, 50, dtypes.f32, align, True, dev) == best  # same bucket

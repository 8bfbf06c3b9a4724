"""attention(config="auto"): the candidates are timed once per (GPU, dtype, head dim, causal,
decoding or not), the winner is stored on disk, reused, and measured again when the file or
the entry is bad. The timer here is a fake one (random times, fresh each run) on the simulator
device; every candidate is also run on the simulator against the float64 reference."""

import importlib
import json

import ml_dtypes
import numpy as np
import pytest

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import attention
from kaio.ops_library import autotune as tuning
from kaio.ops_library.attention import HEAD_DIMS, AttentionConfig, autotuned_config, candidates, padded

from .test_attention_sim import BOUND, reference


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KAIO_CACHE", raising=False)
    return tmp_path


class FakeTimer:
    """Random distinct times (ms) per candidate; records what it timed."""

    def __init__(self, pool):
        times = np.random.default_rng().permutation(len(pool)) + 1.0
        self.times = {c: float(t) for c, t in zip(pool, times, strict=True)}
        self.calls = []

    @property
    def fastest(self):
        return min(self.times, key=self.times.get)

    def __call__(self, config):
        self.calls.append(config)
        return self.times[config]


def refuse(config):
    raise AssertionError(f"timed {config} although a winner is stored")


def stored(cache_dir):
    return json.loads((cache_dir / "autotune" / "attention.json").read_text())


def test_the_winner_is_stored_and_reused(dev, cache_dir):
    pool = candidates(1024, 64)
    timer = FakeTimer(pool)
    best = autotuned_config(dev, dtypes.bf16, 1024, 64, True, timer)
    assert best == timer.fastest and sorted(map(str, timer.calls)) == sorted(map(str, pool))
    (key, entry), = stored(cache_dir).items()
    assert key == f"{dev.name}|sm_{dev.sm}|{dev.compile_arch}|bf16|d64|causal|prefill"
    assert AttentionConfig(**{k: v for k, v in entry["config"].items()}) == best
    assert entry["median_ms"] == {c.label(): timer.times[c] for c in pool}
    assert autotuned_config(dev, dtypes.bf16, 1024, 64, True, refuse) == best  # reused: nothing timed
    assert autotuned_config(dev, dtypes.bf16, 2048, 64, True, refuse) == best  # same shape class


def test_each_key_is_tuned_on_its_own(dev, cache_dir):
    keys = [(dtypes.bf16, 1024, 64, True), (dtypes.f16, 1024, 64, True), (dtypes.bf16, 1024, 64, False),
            (dtypes.bf16, 1024, 128, True), (dtypes.bf16, 1, 64, True)]  # fmt: skip
    winners = {}
    for t, sq, d, causal in keys:
        timer = FakeTimer(candidates(sq, d))
        winners[(t, sq, d, causal)] = autotuned_config(dev, t, sq, d, causal, timer)
        assert timer.calls, "a new key is measured"
    assert len(stored(cache_dir)) == len(keys)
    for (t, sq, d, causal), best in winners.items():
        assert autotuned_config(dev, t, sq, d, causal, refuse) == best


BAD_FILES = {
    "not json": "{ this is not json",
    "a list": "[1, 2, 3]",
    "truncated": '{"x": {"config": {"block_m": 64',
}


@pytest.mark.parametrize("contents", list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_a_corrupt_file_is_measured_again_and_rewritten(dev, cache_dir, contents):
    path = cache_dir / "autotune" / "attention.json"
    path.parent.mkdir(parents=True)
    path.write_text(contents)
    timer = FakeTimer(candidates(1024, 32))
    assert autotuned_config(dev, dtypes.f16, 1024, 32, False, timer) == timer.fastest
    assert timer.calls and len(stored(cache_dir)) == 1  # valid JSON again


BAD_ENTRIES = {
    "mistyped field": {"block_m": "64", "block_n": 32, "warps_m": 4, "warps_n": 1, "stages": 2},
    "bool for int": {"block_m": 64, "block_n": 32, "warps_m": 4, "warps_n": 1, "stages": True},
    "missing field": {"block_m": 64, "block_n": 32, "warps_m": 4, "warps_n": 1},
    "not a candidate": {"block_m": 48, "block_n": 32, "warps_m": 3, "warps_n": 1, "stages": 2},
    "not an object": [64, 32, 4, 1, 2],
}


@pytest.mark.parametrize("config", list(BAD_ENTRIES.values()), ids=list(BAD_ENTRIES))
def test_a_bad_entry_is_measured_again(dev, cache_dir, config):
    timer = FakeTimer(candidates(1024, 32))
    autotuned_config(dev, dtypes.f16, 1024, 32, False, timer)
    data = stored(cache_dir)
    (key,) = data
    data[key]["config"] = config
    (cache_dir / "autotune" / "attention.json").write_text(json.dumps(data))
    tuning.forget()  # as a new process: the file decides
    again = FakeTimer(candidates(1024, 32))
    assert autotuned_config(dev, dtypes.f16, 1024, 32, False, again) == again.fastest
    assert again.calls


def test_a_known_winner_reads_neither_the_file_nor_the_candidates(dev, cache_dir, monkeypatch):
    """Within a process the winner is remembered: on an H200 reading the file and building the
    candidates on every call cost more than a small attention itself."""
    attention_module = importlib.import_module("kaio.ops_library.attention")  # (the package's name is the op)
    best = autotuned_config(dev, dtypes.f16, 1024, 64, False, FakeTimer(candidates(1024, 64)))
    (cache_dir / "autotune" / "attention.json").unlink()
    monkeypatch.setattr(attention_module, "candidates", lambda *a: pytest.fail("candidates built again"))
    monkeypatch.setattr(tuning, "load", lambda op: pytest.fail("the file read again"))
    assert autotuned_config(dev, dtypes.f16, 1024, 64, False, refuse) == best
    monkeypatch.undo()
    tuning.forget()
    again = FakeTimer(candidates(1024, 64))
    assert autotuned_config(dev, dtypes.f16, 1024, 64, False, again) == again.fastest and again.calls


def test_with_the_cache_off_every_call_measures_and_nothing_is_written(dev, cache_dir, monkeypatch):
    monkeypatch.setenv("KAIO_CACHE", "0")
    for _ in range(2):
        timer = FakeTimer(candidates(1024, 64))
        assert autotuned_config(dev, dtypes.bf16, 1024, 64, False, timer) == timer.fastest
        assert timer.calls
    assert not (cache_dir / "autotune").exists()


def test_candidates_fit_and_start_with_the_rule():
    from kaio.ops_library.attention import choose_config

    for d in HEAD_DIMS:
        for sq in (1, 1024):
            pool = candidates(sq, d)
            assert pool[0] == choose_config(sq, d) and len(set(pool)) == len(pool)
            for c in pool:
                assert c.shared_bytes(padded(d)) <= 48 * 1024
                assert c.block_m == 16 * c.warps_m  # 16 query rows per warp


CASES = [(d, sq, c) for d in (32, 64, 128, 256) for sq in (1, 40) for c in candidates(sq, d)]  # 96 runs as 128


@pytest.mark.parametrize("d, sq, config", CASES, ids=[f"d{d}-sq{sq}-{c.label()}" for d, sq, c in CASES])
def test_every_candidate_config_is_correct(dev, d, sq, config):
    rng = np.random.default_rng()
    t = ml_dtypes.bfloat16 if d % 64 else np.float16
    sk = 300 if sq == 1 else 70  # decoding: split into chunks when the config's blocks allow
    q = rng.standard_normal((1, 2, sq, d)).astype(t)
    k = rng.standard_normal((1, 1, sk, d)).astype(t)
    v = rng.standard_normal((1, 1, sk, d)).astype(t)
    out = dev.alloc_from(np.full(q.shape, np.nan, dtype=t))
    attention(dev.alloc_from(q), dev.alloc_from(k), dev.alloc_from(v), causal=True, out=out, config=config)
    want, _ = reference(q, k, v, causal=True)
    err = float(np.abs(out.to_host().astype(np.float64) - want).max())
    assert err <= BOUND, err


def test_config_errors_are_named(dev):
    q = dev.alloc_from(np.zeros((1, 1, 8, 256), np.float16))
    with pytest.raises(KaioTypeError, match="config is None, 'auto' or an AttentionConfig"):
        attention(q, q, q, config="fastest")
    with pytest.raises(KaioTypeError, match="bytes of shared memory for head dim 256"):
        attention(q, q, q, config=AttentionConfig(128, 64, 8, 1, 4))  # 320 KiB


def test_auto_on_the_simulator_uses_the_rule(dev, cache_dir, rng=np.random.default_rng()):
    q = rng.standard_normal((1, 2, 20, 32)).astype(np.float16)
    got = attention(q, q, q, config="auto", device=dev)
    want, _ = reference(q, q, q)
    assert np.abs(got.astype(np.float64) - want).max() <= BOUND
    assert not (cache_dir / "autotune").exists()  # nothing timed on the simulator

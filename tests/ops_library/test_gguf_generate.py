"""examples/gguf_generate.py end to end: a tiny random GGUF model (several formats) written with
gguf.GGUFWriter, its logits for a prompt and greedy decode steps against a float64 numpy forward
pass over ``gguf.quants.dequantize``d weights, for a dense and a mixture-of-experts model."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gguf_generate.py"
SPEC = importlib.util.spec_from_file_location("gguf_generate", EXAMPLE)
generate_example = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = generate_example  # dataclasses look their module up there
SPEC.loader.exec_module(generate_example)

SIZES = {"layers": 2, "dim": 64, "heads": 4, "kv_heads": 2, "ffn": 256, "vocab": 96, "context": 64}
PROMPT = 5  # tokens
DECODE = 3  # greedy steps after the prompt
MARGIN = 0.05  # the reference's choices (experts, greedy tokens) must be this clear of a tie


@dataclass
class Reference:
    logits: np.ndarray  # (tokens, vocab) float64, every position
    routing_margin: float  # the smallest gap between the k-th and the next expert's logit


def weights(path: str) -> dict[str, np.ndarray]:
    reader = gguf.GGUFReader(path)
    return {t.name: gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64) for t in reader.tensors}


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x @ w.T


def rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def rotate(x: np.ndarray, interleaved: bool, base: float = 10000.0) -> np.ndarray:
    """x (S, H, D) at positions 0 .. S-1: llama.cpp's NORM rope (adjacent pairs) or NEOX (halves)."""
    s, _, d = x.shape
    angle = np.arange(s)[:, None, None] * base ** (-np.arange(0, d, 2) / d)[None, None, :]
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : d // 2], x[..., d // 2 :])
    ra, rb = a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2 :] = ra, rb
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def reference(w: dict[str, np.ndarray], ids: list[int], arch: str, experts: int) -> Reference:
    """The whole sequence at once, causal, in float64."""
    heads, kv_heads, dim = SIZES["heads"], SIZES["kv_heads"], SIZES["dim"]
    hd, s = dim // heads, len(ids)
    h = w["token_embd.weight"][ids]
    margin = math.inf
    causal = np.tril(np.ones((s, s), bool))
    for i in range(SIZES["layers"]):
        p = f"blk.{i}."
        x = rms(h, w[p + "attn_norm.weight"])
        q = (linear(x, w[p + "attn_q.weight"])).reshape(s, heads, hd)
        k = (linear(x, w[p + "attn_k.weight"])).reshape(s, kv_heads, hd)
        v = (linear(x, w[p + "attn_v.weight"])).reshape(s, kv_heads, hd)
        if arch.startswith("qwen3"):
            q, k = rms(q, w[p + "attn_q_norm.weight"]), rms(k, w[p + "attn_k_norm.weight"])
        q, k = rotate(q, arch == "llama"), rotate(k, arch == "llama")
        group = heads // kv_heads
        o = np.empty_like(q)
        for hh in range(heads):
            scores = q[:, hh] @ k[:, hh // group].T / math.sqrt(hd)
            scores = np.where(causal, scores, -np.inf)
            pr = np.exp(scores - scores.max(-1, keepdims=True))
            o[:, hh] = (pr / pr.sum(-1, keepdims=True)) @ v[:, hh // group]
        h = h + linear(o.reshape(s, dim), w[p + "attn_output.weight"])
        x = rms(h, w[p + "ffn_norm.weight"])
        if experts:
            logits = linear(x, w[p + "ffn_gate_inp.weight"])
            order = np.argsort(-logits, -1)
            srt = np.take_along_axis(logits, order, -1)
            margin = min(margin, float(np.min(srt[:, 1] - srt[:, 2])))
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            y = np.zeros_like(x)
            for t in range(s):
                top = order[t, :2]
                for e, g in zip(top, pr[t, top] / pr[t, top].sum(), strict=True):
                    act = silu(w[p + "ffn_gate_exps.weight"][e] @ x[t]) * (w[p + "ffn_up_exps.weight"][e] @ x[t])
                    y[t] += g * (w[p + "ffn_down_exps.weight"][e] @ act)
        else:
            act = silu(linear(x, w[p + "ffn_gate.weight"])) * linear(x, w[p + "ffn_up.weight"])
            y = linear(act, w[p + "ffn_down.weight"])
        h = h + y
    return Reference(linear(rms(h, w["output_norm.weight"]), w["output.weight"]), margin)


def greedy_reference(w: dict[str, np.ndarray], prompt: list[int], arch: str, experts: int) -> tuple[list[int], Reference]:
    """The reference's greedy continuation of ``prompt`` and its logits along it; the choices'
    margin (the smallest top-2 gap of a greedy step, and of the routing) comes with it."""
    ids = list(prompt)
    margin = math.inf
    for _ in range(DECODE):
        ref = reference(w, ids, arch, experts)
        top2 = np.sort(ref.logits[-1])[-2:]
        margin = min(margin, top2[1] - top2[0])
        ids.append(int(np.argmax(ref.logits[-1])))
    ref = reference(w, ids, arch, experts)
    return ids[len(prompt) :], Reference(ref.logits, min(margin, ref.routing_margin))


def clear_model(tmp_path: Path, arch: str, experts: int) -> tuple[str, list[int], list[int], Reference]:
    """A fresh random model and prompt whose reference choices are clear of ties (redrawn until
    they are: f16 activations may break a near-tie either way, which says nothing of the ops)."""
    rng = np.random.default_rng()
    for attempt in range(20):
        path = str(tmp_path / f"{arch}-{experts}-{attempt}.gguf")
        generate_example.write_tiny_model(path, arch=arch, experts=experts, seed=int(rng.integers(2**32)), **SIZES)
        prompt = [int(t) for t in rng.integers(0, SIZES["vocab"], PROMPT)]
        w = weights(path)
        continuation, ref = greedy_reference(w, prompt, arch, experts)
        if ref.routing_margin > MARGIN:
            return path, prompt, continuation, ref
    raise AssertionError("no model with clear choices in 20 draws")


@pytest.mark.parametrize(("arch", "experts"), [("llama", 0), ("llama", 4), ("qwen3", 0), ("qwen3moe", 4)],
                         ids=["llama", "llama-moe", "qwen3", "qwen3moe"])  # fmt: skip
def test_logits_and_greedy_tokens_match_a_float64_forward(tmp_path, arch, experts):
    path, prompt, continuation, ref = clear_model(tmp_path, arch, experts)
    model = generate_example.Model(path)
    got = [model.forward(prompt)]
    for token in continuation[:-1]:
        got.append(model.forward([token]))
    logits = np.concatenate(got)
    assert logits.shape == (PROMPT + DECODE - 1, SIZES["vocab"])
    want = ref.logits[: PROMPT + DECODE - 1]
    # f16 activations and KV cache, and int8 activations in the decoding gguf_matmul (as
    # llama.cpp's mmvq: steps of max|x| / 127 per 32, about 0.7% of x's spread each product):
    # measured 1.0-1.4% of the logits' spread in root mean square, 3-8% at most
    spread = float(np.std(want))
    error = logits - want
    assert np.sqrt(np.mean(error**2)) < 0.03 * spread, np.sqrt(np.mean(error**2)) / spread
    np.testing.assert_allclose(logits, want, atol=0.15 * spread, rtol=0)
    assert generate_example.generate(generate_example.Model(path), prompt, DECODE) == continuation


@pytest.mark.parametrize(("arch", "experts"), [("llama", 0), ("llama", 4), ("qwen3", 0), ("qwen3moe", 4)],
                         ids=["llama", "llama-moe", "qwen3", "qwen3moe"])  # fmt: skip
def test_logits_match_llama_cpp(tmp_path, arch, experts):
    """Where llama-cpp-python is installed (pip builds llama.cpp from its sdist, CPU only): the
    same file's logits from llama.cpp itself, which also quantises the activations of its
    quantised products (to Q8) and keeps an f16 KV cache: within twice the float64 bound."""
    llama_cpp = pytest.importorskip("llama_cpp")
    path, prompt, continuation, ref = clear_model(tmp_path, arch, experts)
    llm = llama_cpp.Llama(path, n_ctx=SIZES["context"], logits_all=True, verbose=False, n_threads=2)
    tokens = prompt + continuation[:-1]
    llm.eval(tokens)
    theirs = np.array(llm.scores[: len(tokens)], np.float64)
    model = generate_example.Model(path)
    ours = np.concatenate([model.forward(prompt)] + [model.forward([t]) for t in continuation[:-1]])
    spread = float(np.std(ref.logits[: len(tokens)]))
    assert np.sqrt(np.mean((theirs - ref.logits[: len(tokens)]) ** 2)) < 0.03 * spread  # the file means what we read
    assert np.sqrt(np.mean((ours - theirs) ** 2)) < 0.06 * spread


def test_a_planted_bug_is_caught(tmp_path, monkeypatch):
    """The comparison sees a wrong rope (halves where Llama takes pairs)."""
    path, prompt, _, ref = clear_model(tmp_path, "llama", 0)
    monkeypatch.setattr(generate_example.Hyper, "interleaved", property(lambda self: False))
    logits = generate_example.Model(path).forward(prompt)
    error = logits - ref.logits[:PROMPT]
    assert np.sqrt(np.mean(error**2)) > 0.1 * float(np.std(ref.logits))


def test_sampling_at_a_temperature_replays_with_the_seed(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    generate_example.write_tiny_model(path, seed=3, **SIZES)
    a = generate_example.generate(generate_example.Model(path), [1, 2], 4, temperature=1.0, seed=11)
    b = generate_example.generate(generate_example.Model(path), [1, 2], 4, temperature=1.0, seed=11)
    assert a == b and all(0 <= t < SIZES["vocab"] for t in a)


def test_the_model_refuses_what_it_cannot_run(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    generate_example.write_tiny_model(path, seed=1, **SIZES)
    model = generate_example.Model(path)
    with pytest.raises(ValueError, match="token ids must be in"):
        model.forward([SIZES["vocab"]])
    with pytest.raises(ValueError, match="do not fit the context"):
        model.forward(list(range(SIZES["context"] + 1)))
    writer = gguf.GGUFWriter(str(tmp_path / "other.gguf"), "gpt2")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SystemExit, match="architecture 'gpt2'"):
        generate_example.Model(str(tmp_path / "other.gguf"))


def test_the_example_runs_as_documented(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KAIO_DEVICE"}

    def run(*args: str) -> str:
        r = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env,
                           timeout=600, cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert "wrote tiny.gguf" in run("--write-tiny", "tiny.gguf")
    out = run("tiny.gguf", "--prompt", "1", "5", "9", "--new", "3")
    tokens = out.splitlines()[0].split()[1:]
    assert out.startswith("tokens: ") and len(tokens) == 3 and "text:" in out

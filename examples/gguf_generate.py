"""Generate tokens from a Llama-architecture GGUF file, every computation a kaio op.

    pip install -e . gguf
    python examples/gguf_generate.py --write-tiny tiny.gguf            # a tiny random model
    python examples/gguf_generate.py tiny.gguf --prompt 1 5 9 --new 8  # greedy
    python examples/gguf_generate.py model.gguf --prompt 1 15043 --new 32 --temperature 0.8 --seed 0

Architectures: ``llama`` (Llama, Mistral; with experts, Mixtral) and ``qwen3`` / ``qwen3moe``
(per-head q/k RMS norms, "rotate half" rotary embeddings), read from the file's metadata.
Token ids in, token ids out: there is no tokenizer (the file's token strings are printed when
it has them). It runs on the default device: the GPU if there is one, else kaio's simulator
(small models only: the simulator runs every thread in Python).

What each step runs (kaio.ops_library):

* embedding rows: ``gguf_matmul.dequantize`` of the rows' own blocks (never the whole table);
* per layer: ``rms_norm`` (with ``residual=``: the residual add fused into the next norm),
  ``GGUFLinear`` (``gguf_matmul`` on the file's bytes as they are: Q/K/V/O, gate and up as one
  product when they share a type, down), ``rope``, attention over the KV cache
  (``attention_varlen`` for a block of new tokens, ``paged_attention`` for one), ``silu_and_mul``;
  mixture-of-experts layers: ``gguf_matmul`` for the router, ``moe_topk_softmax`` and
  ``fused_moe`` on the experts' blocks as stored (``qtype=``: ``gguf_grouped_matmul``'s kernel
  decodes each expert's tiles in registers);
* the head: ``rms_norm``, ``GGUFLinear`` (``output.weight``, or the embedding when tied), and
  ``sample`` (argmax, or Gumbel-max at a temperature).

The host only reshapes, writes the new keys and values into the cache, picks the embedding rows'
bytes and builds the rotary tables once. Activations and the KV cache are f16.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from kaio.ops_library import (
    GGUFLinear,
    attention_varlen,
    fused_moe,
    gguf_matmul,
    moe_topk_softmax,
    paged_attention,
    rms_norm,
    rope,
    sample,
    silu_and_mul,
)
from kaio.ops_library.gguf_blocks import block_format
from kaio.ops_library.gguf_matmul import dequantize

ARCHITECTURES = ("llama", "qwen3", "qwen3moe")
PAGE = 16  # keys per page of the KV cache (paged_attention's smallest block)
ACT = np.float16


@dataclass(frozen=True)
class Hyper:
    """The model's sizes, read from the file's metadata (``{arch}.*`` keys)."""

    arch: str
    layers: int
    dim: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_base: float
    context: int
    experts: int
    experts_used: int

    @classmethod
    def of(cls, reader: Any) -> Hyper:
        arch = metadata(reader, "general.architecture")
        if arch not in ARCHITECTURES:
            raise SystemExit(f"gguf_generate: architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}")

        def key(name: str, default: Any = None) -> Any:
            return metadata(reader, f"{arch}.{name}", default)

        dim, heads = int(key("embedding_length")), int(key("attention.head_count"))
        head_dim = int(key("attention.key_length", dim // heads))
        if int(key("rope.dimension_count", head_dim)) != head_dim:
            raise SystemExit("gguf_generate: rotary embeddings over part of a head are not supported")
        return cls(arch, int(key("block_count")), dim, heads, int(key("attention.head_count_kv", heads)), head_dim,
                   float(key("attention.layer_norm_rms_epsilon", 1e-5)), float(key("rope.freq_base", 10000.0)),
                   int(key("context_length", 2048)), int(key("expert_count", 0)), int(key("expert_used_count", 0)))  # fmt: skip

    @property
    def interleaved(self) -> bool:
        """llama.cpp's rope type: Llama rotates adjacent pairs (its converter permutes Q and K
        for that), Qwen the halves."""
        return self.arch == "llama"


def metadata(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise SystemExit(f"gguf_generate: the file has no {key!r}")
        return default
    return f.contents()


def tensor(reader: Any, name: str) -> Any:
    for t in reader.tensors:
        if t.name == name:
            return t
    return None


def norm_weight(reader: Any, name: str) -> np.ndarray:
    return np.asarray(tensor(reader, name).data, np.float32).astype(ACT)


def experts(reader: Any, name: str) -> tuple[np.ndarray, str]:
    """A 3-D expert tensor as stored, (E, rows, K_bytes) uint8 (a float format: its values,
    (E, rows, K)), and its format's name."""
    t = tensor(reader, name)
    return np.asarray(t.data), block_format("gguf_generate", t.tensor_type).name


class Layer:
    def __init__(self, reader: Any, i: int, hp: Hyper) -> None:
        p = f"blk.{i}."
        self.attn_norm, self.ffn_norm = norm_weight(reader, p + "attn_norm.weight"), norm_weight(reader, p + "ffn_norm.weight")
        self.q, self.k, self.v, self.o = (GGUFLinear(reader, p + f"attn_{n}.weight") for n in ("q", "k", "v", "output"))
        self.q_norm = norm_weight(reader, p + "attn_q_norm.weight") if tensor(reader, p + "attn_q_norm.weight") else None
        self.k_norm = norm_weight(reader, p + "attn_k_norm.weight") if tensor(reader, p + "attn_k_norm.weight") else None
        if hp.experts:
            self.router = GGUFLinear(reader, p + "ffn_gate_inp.weight")
            (gate, gate_type), (up, up_type) = (experts(reader, p + f"ffn_{n}_exps.weight") for n in ("gate", "up"))
            self.w_down, down_type = experts(reader, p + "ffn_down_exps.weight")  # (E, D, F)
            if gate_type == up_type:  # one product: (E, 2F, D) with the gate rows first, as stored
                self.w_gate_up = np.ascontiguousarray(np.concatenate([gate, up], axis=1))
            else:
                raise SystemExit(f"gguf_generate: {p}ffn_gate_exps is {gate_type} but ffn_up_exps {up_type}; "
                                 "fused_moe takes one format for both")  # fmt: skip
            self.qtypes = (gate_type, down_type)
        else:
            gate, up = GGUFLinear(reader, p + "ffn_gate.weight"), GGUFLinear(reader, p + "ffn_up.weight")
            # one product for both when they share a format: [gate | up] is what silu_and_mul takes
            self.gate_up = (np.concatenate([gate.weight, up.weight]), gate.qtype) if gate.qtype == up.qtype else None
            self.gate, self.up = gate, up
            self.down = GGUFLinear(reader, p + "ffn_down.weight")
        shape = (hp.context // PAGE, PAGE, hp.kv_heads, hp.head_dim)  # one page table: the pages in order
        self.k_cache, self.v_cache = np.zeros(shape, ACT), np.zeros(shape, ACT)


class Model:
    """A GGUF model loaded for generation; :meth:`forward` runs new tokens after the cached ones."""

    def __init__(self, path: str) -> None:
        import gguf

        reader = gguf.GGUFReader(path)
        self.hp = hp = Hyper.of(reader)
        if hp.context % PAGE:
            raise SystemExit(f"gguf_generate: the context length {hp.context} is not a multiple of {PAGE}")
        self.embedding = GGUFLinear(reader, "token_embd.weight")
        self.vocab = self.embedding.out_features
        self.layers = [Layer(reader, i, hp) for i in range(hp.layers)]
        self.out_norm = norm_weight(reader, "output_norm.weight")
        self.output = GGUFLinear(reader, "output.weight") if tensor(reader, "output.weight") else self.embedding
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        self.token_strings = tokens.contents() if tokens is not None else None
        inv = hp.rope_base ** (-np.arange(0, hp.head_dim, 2, dtype=np.float64) / hp.head_dim)
        angles = np.arange(hp.context, dtype=np.float64)[:, None] * inv[None, :]
        self.cos, self.sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        self.length = 0  # tokens in the cache

    def embed(self, ids: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(self.embedding.weight[ids])  # the rows' own blocks
        return np.asarray(dequantize(rows, self.embedding.qtype)).astype(ACT)

    def forward(self, ids: Any) -> np.ndarray:
        """The f32 logits (n, vocab) of ``n`` new tokens, each seeing the cache and those before it."""
        hp, ids = self.hp, np.asarray(ids, np.int64).reshape(-1)
        n, start = len(ids), self.length
        if n == 0 or start + n > hp.context:
            raise ValueError(f"gguf_generate: {n} new tokens after {start} do not fit the context of {hp.context}")
        if ids.min() < 0 or ids.max() >= self.vocab:
            raise ValueError(f"gguf_generate: token ids must be in [0, {self.vocab}), got {ids.min()} .. {ids.max()}")
        cos, sin = self.cos[start : start + n], self.sin[start : start + n]
        h = self.embed(ids)
        carry = None  # the last block's output, added to h by the next norm
        for layer in self.layers:
            x, h = self.norm(carry, layer.attn_norm, h)
            carry = self.attention(layer, x, cos, sin, start)
            x, h = self.norm(carry, layer.ffn_norm, h)
            carry = self.ffn(layer, x)
        x, _ = self.norm(carry, self.out_norm, h)
        self.length += n
        return np.asarray(self.output(x)).astype(np.float32)

    def norm(self, carry: Any, weight: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``rms_norm(h + carry)`` and the new residual ``h + carry`` (one kernel)."""
        if carry is None:
            return rms_norm(h, weight, self.hp.eps), h
        return rms_norm(carry, weight, self.hp.eps, residual=h)

    def attention(self, layer: Layer, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, start: int) -> np.ndarray:
        hp, n = self.hp, len(x)
        q = layer.q(x).reshape(1, n, hp.heads, hp.head_dim)
        k = layer.k(x).reshape(1, n, hp.kv_heads, hp.head_dim)
        v = layer.v(x).reshape(n, hp.kv_heads, hp.head_dim)
        if layer.q_norm is not None:  # qwen3: an RMS norm over each head
            q = rms_norm(q, layer.q_norm, hp.eps)
            k = rms_norm(k, layer.k_norm, hp.eps)
        q = rope(q, cos, sin, hp.interleaved, layout="bshd").reshape(n, hp.heads, hp.head_dim)
        k = rope(k, cos, sin, hp.interleaved, layout="bshd").reshape(n, hp.kv_heads, hp.head_dim)
        keys, values = (c.reshape(-1, hp.kv_heads, hp.head_dim) for c in (layer.k_cache, layer.v_cache))
        keys[start : start + n], values[start : start + n] = k, v
        seen = start + n
        if n == 1:  # decoding: the new token is the last position of the paged cache
            table = np.arange(hp.context // PAGE, dtype=np.int32).reshape(1, -1)
            o = paged_attention(q, layer.k_cache, layer.v_cache, table, np.array([seen], np.int32))
        else:  # a block of new tokens: causal, aligned to the bottom-right of the cached keys
            cu_q, cu_k = np.array([0, n], np.int32), np.array([0, seen], np.int32)
            o = attention_varlen(q, np.ascontiguousarray(keys[:seen]), np.ascontiguousarray(values[:seen]),
                                 cu_q, cu_k, n, seen, causal=True)  # fmt: skip
        return layer.o(np.asarray(o).reshape(n, hp.heads * hp.head_dim))

    def ffn(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        if self.hp.experts:
            weights, ids = moe_topk_softmax(layer.router(x), self.hp.experts_used, renormalize=True)
            return fused_moe(x, layer.w_gate_up, layer.w_down, weights, ids, qtype=layer.qtypes)
        if layer.gate_up is not None:
            gate_up = gguf_matmul(x, *layer.gate_up)
        else:
            gate_up = np.concatenate([layer.gate(x), layer.up(x)], axis=1)
        return layer.down(silu_and_mul(gate_up))


def generate(model: Model, prompt: list[int], new: int, *, temperature: float = 0.0, seed: int = 0) -> list[int]:
    """``new`` token ids after ``prompt`` (the prompt in one forward, then one token a step)."""
    logits = model.forward(prompt)[-1:]
    out: list[int] = []
    for step in range(new):
        token = int(sample(logits, temperature=temperature, seed=seed, offset=step * model.vocab)[0])
        out.append(token)
        if step + 1 < new:
            logits = model.forward([token])
    return out


# --------------------------------------------------------------------------- a tiny random model


def random_blocks(rng: np.random.Generator, qtype: str, rows: int, k: int, rms: float) -> np.ndarray:
    """Random valid blocks of a format gguf cannot quantise to (the K-quants): random bytes, the
    f16 super-scales then set so the weights' root mean square is about ``rms``."""
    import gguf

    fmt = block_format("gguf_generate", qtype)
    raw = rng.integers(0, 256, (rows, k // fmt.elements, fmt.nbytes), dtype=np.uint8)
    scales = [at for at in (fmt.d_at, fmt.dmin_at) if at >= 0]
    for at in scales:
        raw[:, :, 2 * at : 2 * at + 2] = np.float16(1.0).reshape(1).view(np.uint8)
    unit = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType[qtype])
    scale = rms / float(np.sqrt(np.mean(unit.astype(np.float64) ** 2)))
    for at in scales:
        d = (rng.uniform(0.5, 1.5, raw.shape[:2]) * scale).astype(np.float16)
        raw[:, :, 2 * at : 2 * at + 2] = d[..., None].view(np.uint8).reshape(raw.shape[:2] + (2,))
    return raw.reshape(rows, -1)


def add_weight(writer: Any, rng: np.random.Generator, name: str, shape: tuple[int, ...], qtype: str, rms: float) -> None:
    """A random weight of numpy shape ``shape`` (rows last-but-one, K last) stored as ``qtype``."""
    import gguf

    ggml = gguf.GGMLQuantizationType[qtype]
    rows, k = math.prod(shape[:-1]), shape[-1]
    if qtype in ("Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K"):
        data = random_blocks(rng, qtype, rows, k, rms).reshape(*shape[:-1], -1)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=ggml)
        return
    w = (rng.standard_normal(shape) * rms).astype(np.float32)
    if qtype == "F32":
        writer.add_tensor(name, w)
    elif qtype == "F16":
        writer.add_tensor(name, w.astype(np.float16))
    else:
        data = gguf.quants.quantize(w, ggml)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=ggml)


def write_tiny_model(path: str, *, arch: str = "llama", experts: int = 0, seed: int = 0, layers: int = 2,
                     dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 256, vocab: int = 96,
                     context: int = 64) -> None:  # fmt: skip
    """A random model of ``arch`` (with ``experts`` experts, 2 used each token, when above 0)
    in several formats: Q8_0 embedding and output, Q4_0/Q5_1/Q4_1/Q5_0 attention; Q8_0 gate, up
    Q8_0 (one product with the gate) in even layers and F16 (two) in odd ones, down Q6_K and
    Q4_K (the K-quants need K = ffn, a multiple of 256); Q8_0 gate and up experts, F16 and Q4_0
    down experts, an F32 router."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    head_dim = dim // heads
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(dim)
    expert_ffn = ffn // 4
    writer.add_feed_forward_length(expert_ffn if experts else ffn)  # llama.cpp's Mixtral reads it per expert
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(2)
        writer.add_expert_feed_forward_length(expert_ffn)
    # a SentencePiece vocabulary of placeholders, so llama.cpp loads the file too (it needs the
    # special tokens and the newline's byte token)
    tokens = ["<unk>", "<s>", "</s>", "<0x0A>"] + [f"<{i}>" for i in range(4, vocab)]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([2, 3, 3, 6] + [1] * (vocab - 4))  # unknown, control, control, byte, normal
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    s = 1 / math.sqrt(dim)
    add_weight(writer, rng, "token_embd.weight", (vocab, dim), "Q8_0", 1.0)
    for i in range(layers):
        p = f"blk.{i}."
        for name, size in (("attn_norm", dim), ("ffn_norm", dim)):
            writer.add_tensor(p + name + ".weight", (1 + 0.1 * rng.standard_normal(size)).astype(np.float32))
        add_weight(writer, rng, p + "attn_q.weight", (heads * head_dim, dim), "Q4_0", s)
        add_weight(writer, rng, p + "attn_k.weight", (kv_heads * head_dim, dim), "Q5_1", s)
        add_weight(writer, rng, p + "attn_v.weight", (kv_heads * head_dim, dim), "Q4_1", s)
        add_weight(writer, rng, p + "attn_output.weight", (dim, heads * head_dim), "Q5_0", s)
        if arch.startswith("qwen3"):
            for name in ("attn_q_norm", "attn_k_norm"):
                writer.add_tensor(p + name + ".weight", (1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32))
        if experts:
            f = expert_ffn
            add_weight(writer, rng, p + "ffn_gate_inp.weight", (experts, dim), "F32", 4 * s)
            add_weight(writer, rng, p + "ffn_gate_exps.weight", (experts, f, dim), "Q8_0", s)
            add_weight(writer, rng, p + "ffn_up_exps.weight", (experts, f, dim), "Q8_0", s)
            add_weight(writer, rng, p + "ffn_down_exps.weight", (experts, dim, f), ("F16", "Q4_0")[i % 2], 1 / math.sqrt(f))
        else:
            add_weight(writer, rng, p + "ffn_gate.weight", (ffn, dim), "Q8_0", s)
            add_weight(writer, rng, p + "ffn_up.weight", (ffn, dim), "Q8_0" if i % 2 == 0 else "F16", s)
            add_weight(writer, rng, p + "ffn_down.weight", (dim, ffn), ("Q6_K", "Q4_K")[i % 2], 1 / math.sqrt(ffn))
    writer.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32))
    add_weight(writer, rng, "output.weight", (vocab, dim), "Q8_0", s)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a GGUF file")
    parser.add_argument("--prompt", type=int, nargs="+", default=[1], help="token ids")
    parser.add_argument("--new", type=int, default=8, help="tokens to generate")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-tiny", metavar="PATH", help="write a tiny random model to PATH and stop")
    parser.add_argument("--experts", type=int, default=0, help="with --write-tiny: experts per MoE layer")
    parser.add_argument("--arch", default="llama", choices=ARCHITECTURES, help="with --write-tiny")
    args = parser.parse_args(argv)
    if args.write_tiny:
        write_tiny_model(args.write_tiny, arch=args.arch, experts=args.experts, seed=args.seed)
        print(f"wrote {args.write_tiny}: a tiny random {args.arch} model"
              + (f" with {args.experts} experts" if args.experts else ""))  # fmt: skip
        return 0
    if not args.model:
        parser.error("give a GGUF file (or --write-tiny PATH)")
    model = Model(args.model)
    ids = generate(model, args.prompt, args.new, temperature=args.temperature, seed=args.seed)
    print("tokens:", " ".join(map(str, ids)))
    if model.token_strings is not None:
        print("text:  ", " ".join(repr(model.token_strings[i]) for i in ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""examples/gguf_generate.py beside llama.cpp: the same GGUF file, the same tokens, their logits'
agreement and each one's decoding speed.

    python benchmarks/gguf_generate.py                    # tiny random models (dense, MoE)
    python benchmarks/gguf_generate.py --model m.gguf     # a file of yours
    python benchmarks/gguf_generate.py --new 32           # decode steps per model

kaio runs on the default device (a GPU if present, else the simulator: its tokens/s measure the
simulator, not a GPU); llama.cpp (``pip install llama-cpp-python``, built from its sdist, CPU
only here) on the CPU's threads. The logits are those of the prompt and of each decode step,
teacher-forced on llama.cpp's greedy tokens; ``rms diff`` is their root mean square difference
over the standard deviation of llama.cpp's logits, ``argmax agree`` the steps whose greedy
token is the same. Without llama-cpp-python the kaio rows alone are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gguf_generate.py"


def example():
    spec = importlib.util.spec_from_file_location("gguf_generate", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def kaio_run(ge, path: str, tokens: list[int], prompt: int) -> tuple[np.ndarray, float]:
    """kaio's logits for ``tokens`` (the prompt in one forward, then one token a step) and its
    decode tokens per second (the steps after the prompt)."""
    model = ge.Model(path)
    logits = [model.forward(tokens[:prompt])]
    start = time.perf_counter()
    for t in tokens[prompt:]:
        logits.append(model.forward([t]))
    steps = len(tokens) - prompt
    return np.concatenate(logits), steps / max(time.perf_counter() - start, 1e-9)


def llama_cpp_run(llama_cpp, path: str, prompt: list[int], new: int, context: int) -> tuple[np.ndarray, list[int], float]:
    """llama.cpp's greedy continuation, its logits along it and its decode tokens per second."""
    llm = llama_cpp.Llama(path, n_ctx=context, logits_all=True, verbose=False, n_threads=os.cpu_count())
    llm.eval(prompt)
    tokens = list(prompt)
    start = time.perf_counter()
    for _ in range(new):
        tokens.append(int(np.argmax(llm.scores[len(tokens) - 1])))
        llm.eval(tokens[-1:])
    rate = new / max(time.perf_counter() - start, 1e-9)
    return np.array(llm.scores[: len(tokens) - 1], np.float64), tokens[: len(tokens) - 1], rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a GGUF file (repeatable; default: tiny random models)")
    parser.add_argument("--prompt", type=int, nargs="+", default=[1, 5, 9, 14, 3])
    parser.add_argument("--new", type=int, default=8)
    args = parser.parse_args()
    ge = example()
    import kaio

    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    work = tempfile.mkdtemp()
    models = args.model or []
    if not models:
        for arch, experts in (("llama", 0), ("llama", 4), ("qwen3", 0), ("qwen3moe", 4)):
            path = os.path.join(work, f"{arch}-{experts}.gguf")
            ge.write_tiny_model(path, arch=arch, experts=experts, seed=0)
            models.append(path)
    print(f"kaio on {kaio.Device()}; llama.cpp: {'llama-cpp-python ' + llama_cpp.__version__ if llama_cpp else 'not installed'}")
    print("| model | kaio tokens/s | llama.cpp tokens/s | rms diff | argmax agree |")
    print("| --- | --- | --- | --- | --- |")
    for path in models:
        context = ge.Model(path).hp.context
        if llama_cpp is not None:
            theirs, tokens, their_rate = llama_cpp_run(llama_cpp, path, args.prompt, args.new, context)
        else:
            tokens = list(args.prompt) + [1] * (args.new - 1)
        ours, our_rate = kaio_run(ge, path, tokens, len(args.prompt))
        name = Path(path).stem
        if llama_cpp is None:
            print(f"| {name} | {our_rate:.2f} | - | - | - |")
            continue
        diff = np.sqrt(np.mean((ours - theirs) ** 2)) / np.std(theirs)
        steps = slice(len(args.prompt) - 1, None)
        agree = int(np.sum(np.argmax(ours[steps], -1) == np.argmax(theirs[steps], -1)))
        print(f"| {name} | {our_rate:.2f} | {their_rate:.1f} | {diff:.4f} | {agree}/{args.new} |")


if __name__ == "__main__":
    main()

"""help() on an op object shows the user-facing documentation, not the op class's own note."""

import pydoc

from kaio.ops_library import attention, matmul


def test_help_of_matmul_shows_how_to_call_it() -> None:
    text = pydoc.render_doc(matmul, renderer=pydoc.plaintext)
    assert "matmul(a, b, bias=bias" in text
    assert "``acc``" in text


def test_help_of_attention_shows_how_to_call_it() -> None:
    text = pydoc.render_doc(attention, renderer=pydoc.plaintext)
    assert "attention(q, k, v, causal=True" in text and "kv_lens" in text


def test_docs_ops_md_lists_every_public_op() -> None:
    """Every forward op of kaio.ops_library is in docs/ops.md with its call (the backward
    functions are in docs/training.md, the classes are the ops' types)."""
    import re
    from pathlib import Path

    from kaio.ops_library import _OPS

    text = (Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text()
    ops = [n for n in _OPS if n.islower() and not n.endswith("_backward")]
    assert {"gguf_matmul", "int8_matmul", "fp8_matmul", "quantize_int8", "quantize_fp8"} <= set(ops)
    missing = [n for n in ops if not re.search(rf"`{n}\(", text)]
    assert not missing, f"docs/ops.md does not list {missing}"

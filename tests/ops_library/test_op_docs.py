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

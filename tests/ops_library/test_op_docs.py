"""help() on an op object shows the user-facing documentation, not the op class's own note."""

import pydoc

from kaio.ops_library import matmul


def test_help_of_matmul_shows_how_to_call_it() -> None:
    text = pydoc.render_doc(matmul, renderer=pydoc.plaintext)
    assert "matmul(a, b, bias=bias" in text
    assert "``acc``" in text

"""The suite's warning filters (pyproject.toml): a deprecation raised by xDSL or kaio fails the
test, one that torch's own modules raise about torch's own APIs does not (on torch 2.11 a
`torch.compile` on a GPU imports ``torch.jit.script_method`` and warns)."""

from __future__ import annotations

import warnings

import pytest


def _warn_from(module: str) -> None:
    warnings.warn_explicit("old API", DeprecationWarning, f"{module}.py", 1, module=module)


@pytest.mark.parametrize("module", ["xdsl.irdl.operations", "kaio.compiler", "torchvision_like"])
def test_a_deprecation_outside_torch_is_an_error(module: str) -> None:
    with pytest.raises(DeprecationWarning):
        _warn_from(module)


def test_a_deprecation_inside_torch_is_ignored() -> None:
    _warn_from("torch.jit._script")

"""One generic test over every model preset: output shape, no NaN, every parameter gets a gradient.

It runs over the one registry of families, ``course_lib.models.families()``; the family contract
is written in ``course_lib/models/_family.py``. Test protocol (each family module that defines
``PRESETS``):

``TINY: dict[str, Any]``
    Config overrides that make *every* preset of the family tiny, applied as
    ``PRESETS[name](**TINY)``, e.g. ``{"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 64}``.
    The tiny model must build and run a forward/backward pass in well under a second.

``example_batch(model, *, batch_size=2) -> tuple[dict[str, Any], tuple[int, ...]]``
    Deterministic dummy inputs for ``model(**inputs)`` (ids inside the model's vocabulary, some
    padding wherever the model takes masks or lengths) and the expected shape of the main output.
    The inputs must exercise every parameter (every head the model has).

The *main output* is the return value when it is a tensor, else its first element (tuple or list)
or its first value (dict or dataclass). The test builds each tiny model after
``torch.manual_seed(0)``, puts it in eval mode (no dropout noise), and checks that

1. the main output has the expected shape;
2. every floating tensor in the output is finite;
3. backpropagating ``sum_i (out_i * r_i).sum()`` over all floating output tensors (``r_i`` fixed
   random weights, so no symmetry can cancel a gradient) gives every parameter that requires grad
   a finite gradient that is not identically zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import ModuleType

import pytest
import torch

import course_lib.models as models


def _families() -> dict[str, ModuleType]:
    """Preset name -> the family module that defines it."""
    return {name: module for module in models.families().values() for name in module.PRESETS}


FAMILIES = _families()


def _leaves(out) -> list[torch.Tensor]:
    """Floating-point tensors of a model output, in order (tensor, tuple/list, dict, dataclass)."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in _leaves(v)]
    if isinstance(out, tuple | list):
        return [t for v in out for t in _leaves(v)]
    if dataclasses.is_dataclass(out):
        return [t for f in dataclasses.fields(out) for t in _leaves(getattr(out, f.name))]
    return []


def _main_output(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        return next(iter(out.values()))
    if isinstance(out, tuple | list):
        return out[0]
    if dataclasses.is_dataclass(out):
        return getattr(out, dataclasses.fields(out)[0].name)
    raise TypeError(f"cannot find the main output in a {type(out).__name__}")


def test_every_preset_is_covered():
    assert set(FAMILIES) == set(models.available_models())
    for name, module in FAMILIES.items():
        missing = [attr for attr in ("TINY", "example_batch") if not hasattr(module, attr)]
        assert not missing, (
            f"{module.__name__} defines preset {name!r} but not {missing}; "
            "see the protocol in tests/lib/test_models_generic.py"
        )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_tiny_preset_forward_backward(name):
    module = FAMILIES[name]
    torch.manual_seed(0)
    model = module.PRESETS[name](**module.TINY).eval()
    inputs, expected_shape = module.example_batch(model, batch_size=2)
    out = model(**inputs)

    main = _main_output(out)
    assert tuple(main.shape) == tuple(expected_shape), f"{name}: output {tuple(main.shape)}"
    leaves = _leaves(out)
    assert leaves, f"{name}: the output holds no floating-point tensor"
    for t in leaves:
        assert torch.isfinite(t).all(), f"{name}: non-finite values in an output"

    generator = torch.Generator().manual_seed(0)
    loss = sum((t * torch.randn(t.shape, generator=generator)).sum() for t in leaves)
    loss.backward()
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        assert p.grad is not None, f"{name}: parameter {pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: non-finite gradient in {pname}"
        assert p.grad.abs().sum() > 0, f"{name}: gradient of {pname} is identically zero"

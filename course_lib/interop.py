"""Load other libraries' weights into course_lib models.

* ``from_hf(hf_model)``: a Hugging Face model (``GPT2LMHeadModel.from_pretrained("gpt2")``) ->
  the course_lib model holding the same weights.
* ``from_timm_state_dict(model_or_name, state_dict)``: a timm checkpoint (a state dict, e.g.
  ``torch.load("vit_base_patch16_224.pth")`` or ``safetensors.torch.load_file(...)``) -> a
  course_lib ViT, Swin or DaViT with those weights. Each family documents its key mapping in
  its ``from_timm`` (``course_lib.models.vit.from_timm``, ``swin.from_timm``,
  ``davit.from_timm``).

Both read the one registry of model families (``course_lib.models.families``): a family lists
the Hugging Face classes it converts in ``HF_CONVERTERS`` and its timm loader in
``TIMM_LOADER``. Importing this module imports neither ``transformers`` nor ``timm``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from course_lib import models


def hf_converters() -> dict[str, Callable[[nn.Module], nn.Module]]:
    """Hugging Face class name -> converter, over all families."""
    table: dict[str, Callable[[nn.Module], nn.Module]] = {}
    for module in models.families().values():
        table.update(getattr(module, "HF_CONVERTERS", {}))
    return table


def from_hf(model: nn.Module) -> nn.Module:
    """Return the course_lib model holding the same weights as the Hugging Face ``model``."""
    converters = hf_converters()
    cls = type(model).__name__
    if cls not in converters:
        raise TypeError(
            f"from_hf does not know how to convert a {cls}; supported classes: "
            f"{', '.join(sorted(converters))}"
        )
    return converters[cls](model)


def from_timm_state_dict(
    model_or_name: nn.Module | str, state_dict: Mapping[str, Tensor], **overrides: Any
) -> nn.Module:
    """Load a timm ``state_dict`` into a course_lib model; returns the model in eval mode.

    ``model_or_name`` is a model with the checkpoint's sizes, or a preset name built with
    ``create(name, **overrides)`` (``"vit-b/16"``, ``"swin-t"``, ``"davit-t"`` ...).
    """
    if isinstance(model_or_name, str):
        model = models.create(model_or_name, **overrides)
    elif overrides:
        raise TypeError("overrides only apply when a preset name is given")
    else:
        model = model_or_name
    loaders = {
        module.__name__: module.TIMM_LOADER
        for module in models.families().values()
        if hasattr(module, "TIMM_LOADER")
    }
    loader = loaders.get(type(model).__module__)
    if loader is None:
        families = ", ".join(name.rsplit(".", 1)[-1] for name in sorted(loaders))
        raise TypeError(
            f"no timm loader for a {type(model).__name__}; families with one: {families}"
        )
    return loader(model, state_dict)

"""The contract every model family follows: config names, presets, overrides, one registry.

A *family* is one module ``course_lib/models/<family>.py``. It defines

* a frozen config dataclass, ``<Family>Config``;
* a model class built as ``Model(config=config)``;
* ``PRESETS``: preset name -> factory ``(**overrides) -> nn.Module``, each made by :func:`preset`;
* ``TINY`` and ``example_batch`` for the generic model test (``tests/test_models_generic.py``);
* optionally ``HF_CONVERTERS`` (Hugging Face class name -> converter) and ``TIMM_LOADER``
  (a function ``(model, state_dict) -> model``), which ``course_lib.interop`` reads.

:func:`course_lib.models.registry` discovers the families; ``create``, ``available_models`` and
``course_lib.interop`` all read that one registry, so adding a family edits nothing but its file.

Config names
------------
Every config answers to the same names for the same ideas (:data:`CONTRACT`):

============== ==========================================================================
``embed_dim``  width of the residual stream, C (hierarchical models: of the first stage)
``depth``      number of Transformer blocks (hierarchical or encoder-decoder: all of them)
``num_heads``  attention heads (hierarchical models: a tuple, one entry per stage)
``mlp_ratio``  hidden width of the MLP divided by ``embed_dim``
``dropout``    one probability, used wherever the reference applies dropout: embeddings,
               attention weights (manual and fused paths), residual branches, MLP
``norm_eps``   epsilon of the LayerNorms
``fused_attn`` True: ``torch.nn.functional.scaled_dot_product_attention``; False: the
               lecture's manual path. Both compute the same function (tested per family)
============== ==========================================================================

A field keeps another name only where a published signature demands it: a checkpoint's config
(GPT-2's ``n_embd``, ``n_layer``, ``n_head``; Hugging Face BERT's ``hidden_size``,
``num_hidden_layers``, ``num_attention_heads``, ``layer_norm_eps``), a paper's table that a
chapter reproduces (the Transformer's ``d_model``, ``d_ff``), or an assignment's graded
signature (ViT's ``dim``, ``mlp_dim`` in A5). The contract name is then an :class:`alias`: it
reads the field and ``create(name, embed_dim=...)`` writes it. A contract name that is computed
from several fields (``mlp_ratio = intermediate_size / hidden_size``) is a read-only property;
overriding it raises an error that names the fields to set instead.

The two recurrent families (``seq2seq``, ``captioning``) have additive attention, no blocks and
no heads: they declare ``CONTRACT_EXEMPT`` with the names that do not apply to them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

__all__ = [
    "CONTRACT",
    "alias",
    "apply_overrides",
    "config_fields",
    "load_converted",
    "preset",
    "split_chunks",
]

#: The names every model config answers to (see the module docstring).
CONTRACT = ("embed_dim", "depth", "num_heads", "mlp_ratio", "dropout", "norm_eps", "fused_attn")


class alias(property):  # noqa: N801 (used like ``property``)
    """A contract name for a config field that keeps its checkpoint's name.

    ``embed_dim = alias("n_embd")`` in a config class reads ``config.n_embd``; :func:`preset`
    factories accept ``embed_dim=...`` as an override of ``n_embd``.
    """

    def __init__(self, field: str) -> None:
        super().__init__(lambda config: getattr(config, field), doc=f"Alias of ``{field}``.")
        self.field = field


def config_fields(config_cls: type) -> list[str]:
    """The constructor fields of a config dataclass, in order."""
    return [f.name for f in dataclasses.fields(config_cls)]


def apply_overrides(config: Any, overrides: dict[str, Any]) -> Any:
    """``dataclasses.replace(config, **overrides)`` with contract aliases resolved.

    Raises ``TypeError`` naming the valid fields for an unknown name, and naming the fields to set
    for a read-only (computed) contract name.
    """
    cls = type(config)
    valid = config_fields(cls)
    resolved: dict[str, Any] = {}
    for name, value in overrides.items():
        attr = getattr(cls, name, None)
        if isinstance(attr, alias):
            name = attr.field
        elif isinstance(attr, property):
            raise TypeError(
                f"{cls.__name__}.{name} is computed from other fields ({attr.__doc__}); "
                f"set those instead. Valid fields: {', '.join(valid)}"
            )
        elif name not in valid:
            raise TypeError(
                f"unknown {cls.__name__} field(s) {[name]}; valid fields: {', '.join(valid)}"
            )
        if name in resolved:
            raise TypeError(f"{cls.__name__}.{name} is overridden twice (once through an alias)")
        resolved[name] = value
    return dataclasses.replace(config, **resolved)


def preset(model_cls: Callable[..., nn.Module], config: Any) -> Callable[..., nn.Module]:
    """A factory ``(**overrides) -> model_cls(config=config with overrides)`` for ``PRESETS``."""

    def build(**overrides: Any) -> nn.Module:
        return model_cls(config=apply_overrides(config, overrides))

    name = getattr(model_cls, "__name__", "model")
    build.__doc__ = f"{name} with {config}; keyword arguments override config fields."
    build.config = config  # type: ignore[attr-defined]
    build.model_cls = model_cls  # type: ignore[attr-defined]
    return build


def split_chunks(
    prefix: str, param: str, value: Tensor, names: tuple[str, ...]
) -> dict[str, Tensor]:
    """Split a fused projection's ``value`` (rows side by side) into ``{prefix}{name}.{param}``.

    ``split_chunks("attn.", "weight", qkv_weight, ("q_proj", "k_proj", "v_proj"))`` gives the
    three (C, C) weights of a (3C, C) ``qkv`` weight, in that order.
    """
    chunks = value.chunk(len(names), dim=0)
    return {f"{prefix}{name}.{param}": chunk for name, chunk in zip(names, chunks, strict=True)}


def load_converted(
    model: nn.Module,
    state_dict: Mapping[str, Tensor],
    convert: Callable[[str, Tensor], dict[str, Tensor]],
    *,
    source: str,
    ignore: tuple[str, ...] = (),
) -> nn.Module:
    """Load a foreign ``state_dict`` into ``model``; ``convert(key, value) -> {our key: value}``.

    Keys matching a regular expression in ``ignore`` (buffers the model recomputes) are skipped.
    Every other key must land on a parameter of ``model``, every parameter must be filled, and the
    shapes must agree; otherwise a ``KeyError`` or ``ValueError`` names the keys. Returns ``model``
    in eval mode.
    """
    ours: dict[str, Tensor] = {}
    origin: dict[str, str] = {}
    for key, value in state_dict.items():
        if any(re.search(pattern, key) for pattern in ignore):
            continue
        for new_key, new_value in convert(key, value).items():
            ours[new_key], origin[new_key] = new_value, key
    expected = model.state_dict()
    unexpected = sorted(origin[k] for k in set(ours) - set(expected))
    missing = sorted(set(expected) - set(ours))
    name = type(model).__name__
    if unexpected or missing:
        raise KeyError(
            f"the {source} state dict does not match this {name}: {source} keys without a place "
            f"{unexpected[:8]}, parameters left empty {missing[:8]}; is it the same architecture?"
        )
    wrong = [
        f"{origin[k]} {tuple(v.shape)} -> {k} {tuple(expected[k].shape)}"
        for k, v in ours.items()
        if v.shape != expected[k].shape
    ]
    if wrong:
        raise ValueError(
            f"shapes differ between the {source} state dict and this {name} "
            f"({'; '.join(wrong[:4])}); build the model with the checkpoint's sizes"
        )
    model.load_state_dict({k: v.detach().clone() for k, v in ours.items()})
    return model.eval()

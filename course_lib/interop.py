"""Load Hugging Face checkpoints into course_lib models: ``from_hf(hf_model) -> course_lib model``.

This is how an online user brings real weights (``GPT2LMHeadModel.from_pretrained("gpt2")``) into
the course's code. Each family module implements its own converter; this module only dispatches on
the Hugging Face class name, so importing it does not import ``transformers``.
"""

from __future__ import annotations

import importlib

from torch import nn

# Hugging Face class name -> "course_lib module:converter function".
_CONVERTERS = {
    "GPT2Model": "course_lib.models.gpt:from_hf_gpt2",
    "GPT2LMHeadModel": "course_lib.models.gpt:from_hf_gpt2",
    "BertModel": "course_lib.models.bert:from_hf_bert",
    "BertForPreTraining": "course_lib.models.bert:from_hf_bert",
    "BertForMaskedLM": "course_lib.models.bert:from_hf_bert",
    "ViTModel": "course_lib.models.vit:from_hf_vit",
    "ViTForImageClassification": "course_lib.models.vit:from_hf_vit",
    "SwinModel": "course_lib.models.swin:from_hf_swin",
    "SwinForImageClassification": "course_lib.models.swin:from_hf_swin",
}


def from_hf(model: nn.Module) -> nn.Module:
    """Return the course_lib model holding the same weights as the Hugging Face ``model``."""
    cls = type(model).__name__
    if cls not in _CONVERTERS:
        raise TypeError(
            f"from_hf does not know how to convert a {cls}; supported classes: "
            f"{', '.join(sorted(_CONVERTERS))}"
        )
    module_name, func = _CONVERTERS[cls].split(":")
    return getattr(importlib.import_module(module_name), func)(model)

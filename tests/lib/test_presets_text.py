"""Text-model presets reproduce the published sizes (counted on the meta device, no memory used)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib.models import available_models, create

TEXT_PRESETS = [n for n in available_models() if n.startswith(("bert", "gpt2", "gpt3", "vilbert"))]
TEXT_PRESETS += ["gpt-tiny"]

# Published sizes. GPT-2: Radford et al. 2019 Table 2 says 117M/345M/762M/1542M, counts of an
# earlier tally; the released checkpoints (tied embeddings) have 124M/355M/774M/1558M parameters.
# GPT-3: Brown et al. 2020 Table 2.1. BERT: Devlin et al. 2019 Section 3 (110M and 340M; the exact
# BERT-large count is 335M, which the paper rounds up).
PUBLISHED = {
    "gpt2": 124e6,
    "gpt2-medium": 355e6,
    "gpt2-large": 774e6,
    "gpt2-xl": 1558e6,
    "gpt3-175b": 175e9,
    "bert-base": 110e6,
    "bert-large": 335e6,
}


def count_on_meta(name: str, **overrides) -> int:
    with torch.device("meta"):
        model = create(name, **overrides)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_sizes_are_within_one_percent(name):
    n = count_on_meta(name)
    assert abs(n - PUBLISHED[name]) / PUBLISHED[name] < 0.01, f"{name}: {n:,}"


def test_bert_large_is_the_papers_340m():
    assert abs(count_on_meta("bert-large") - 340e6) / 340e6 < 0.02


@pytest.mark.parametrize(
    "name, hf_class, hf_kwargs",
    [
        ("gpt2", "GPT2LMHeadModel", {}),
        ("gpt2-medium", "GPT2LMHeadModel", dict(n_layer=24, n_head=16, n_embd=1024)),
        ("bert-base", "BertModel", {}),
        ("bert-base-pretraining", "BertForPreTraining", {}),
        ("bert-large", "BertModel", dict(hidden_size=1024, num_hidden_layers=24,
                                         num_attention_heads=16, intermediate_size=4096)),
    ],
)  # fmt: skip
def test_counts_equal_hugging_face(name, hf_class, hf_kwargs):
    transformers = pytest.importorskip("transformers")
    config_class = transformers.GPT2Config if "GPT2" in hf_class else transformers.BertConfig
    with torch.device("meta"):
        hf = getattr(transformers, hf_class)(config_class(**hf_kwargs))
    assert count_on_meta(name) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("name", TEXT_PRESETS)
def test_every_text_preset_builds_and_takes_overrides(name):
    with torch.device("meta"):
        model = create(name)
    field = next(f for f in ("n_layer", "num_hidden_layers", "num_co_layers")
                 if hasattr(model.config, f))  # fmt: skip
    with torch.device("meta"):
        smaller = create(name, **{field: 1})
    assert getattr(smaller.config, field) == 1
    assert dataclasses.replace(smaller.config, **{field: getattr(model.config, field)}) == (
        model.config
    )


def test_unknown_override_is_an_error():
    for name, typo in (("gpt-tiny", "n_layers"), ("bert-tiny", "hidden"), ("vilbert-tiny", "lr")):
        with pytest.raises(TypeError, match=f"unknown .*{typo}.*valid fields"):
            create(name, **{typo: 3})

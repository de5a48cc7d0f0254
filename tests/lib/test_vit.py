"""ViT: published sizes, Hugging Face as an oracle, attention maps and rollout."""

from __future__ import annotations

import pytest
import torch

from course_lib.gpu import count_parameters
from course_lib.interop import from_hf
from course_lib.models import create
from course_lib.models.vit import (
    VisionTransformer,
    ViTConfig,
    attention_rollout,
    cls_attention_maps,
)

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("name,millions", [("vit-b/16", 86), ("vit-l/16", 307), ("vit-h/14", 632)])
def test_presets_match_table_1(name, millions):
    with torch.device("meta"):
        model = create(name)
    n = count_parameters(model)
    assert abs(n - millions * 1e6) <= 0.015 * millions * 1e6, f"{name}: {n / 1e6:.1f}M"


def _perturbed(hf_model):
    """Random offsets on every HF parameter, so LayerNorm weights (init 1/0) are tested too."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return hf_model.eval()


def _hf_config(**overrides):
    kwargs = dict(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=48, num_labels=7,
    )  # fmt: skip
    kwargs.update(overrides)
    return transformers.ViTConfig(**kwargs)


def test_from_hf_vit_model_hidden_states_and_pooler():
    torch.manual_seed(0)
    hf = _perturbed(transformers.ViTModel(_hf_config()))
    ours = from_hf(hf)
    assert ours.norm.eps == 1e-12 and ours.blocks[0].norm1.eps == 1e-12  # HF's default carried
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        out = hf(pixel_values=x)
        torch.testing.assert_close(
            ours.forward_features(x), out.last_hidden_state, rtol=0, atol=1e-5
        )
        torch.testing.assert_close(ours(x), out.pooler_output, rtol=0, atol=1e-5)


def test_from_hf_vit_without_pooler_returns_cls_token():
    torch.manual_seed(0)
    hf = _perturbed(transformers.ViTModel(_hf_config(layer_norm_eps=1e-6), add_pooling_layer=False))
    ours = from_hf(hf)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(x), hf(pixel_values=x).last_hidden_state[:, 0], atol=1e-5, rtol=0
        )


def test_from_hf_vit_for_image_classification_logits():
    torch.manual_seed(0)
    hf = _perturbed(
        transformers.ViTForImageClassification(_hf_config(num_channels=1, patch_size=2))
    )
    ours = from_hf(hf)
    x = torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        logits = ours(x)
        torch.testing.assert_close(logits, hf(pixel_values=x).logits, rtol=0, atol=1e-5)
    assert logits.shape == (4, 7)


def test_patch_forms_give_the_same_model_output():
    torch.manual_seed(0)
    conv = create("vit-tiny")
    linear = create("vit-tiny", patch_form="linear")
    linear.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(conv(x), linear(x), rtol=1e-5, atol=1e-5)


def test_return_attn_weights_and_manual_path_agree_with_fused():
    torch.manual_seed(0)
    model = create("vit-tiny").eval()
    x = torch.randn(2, 3, 16, 16)
    logits = model(x)  # fused attention
    logits2, maps = model(x, return_attn=True)  # manual path that returns the weights
    torch.testing.assert_close(logits, logits2, rtol=1e-5, atol=1e-5)
    T = (16 // 4) ** 2 + 1
    assert len(maps) == model.config.depth
    for a in maps:
        assert a.shape == (2, model.config.num_heads, T, T)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, model.config.num_heads, T))
    cls = cls_attention_maps(maps[-1], (4, 4))
    assert cls.shape == (2, model.config.num_heads, 4, 4)
    torch.testing.assert_close(cls.flatten(-2), maps[-1][:, :, 0, 1:])


def test_attention_rollout_against_explicit_products():
    torch.manual_seed(0)
    layers = [torch.rand(2, 3, 5, 5).softmax(-1) for _ in range(3)]
    eye = torch.eye(5)

    def step(a):
        a = 0.5 * a.mean(1) + 0.5 * eye
        return a / a.sum(-1, keepdim=True)

    expected = step(layers[2]) @ step(layers[1]) @ step(layers[0])
    rollout = attention_rollout(layers)
    torch.testing.assert_close(rollout, expected)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 5))  # still a distribution
    # Without the residual term, rollout is the plain product of head-averaged attention.
    plain = attention_rollout(layers, residual=False)
    torch.testing.assert_close(plain, layers[2].mean(1) @ layers[1].mean(1) @ layers[0].mean(1))
    # Layers that attend only to themselves pass information straight through.
    identity = [eye.expand(2, 3, 5, 5) for _ in range(4)]
    torch.testing.assert_close(attention_rollout(identity), eye.expand(2, 5, 5))
    assert cls_attention_maps(rollout[:, None].squeeze(1), (2, 2)).shape == (2, 2, 2)
    with pytest.raises(ValueError, match="head_fusion"):
        attention_rollout(layers, head_fusion="median")
    with pytest.raises(ValueError, match="grid"):
        cls_attention_maps(rollout, (3, 3))


def test_clear_errors_for_bad_inputs():
    model = create("vit-tiny")
    with pytest.raises(ValueError, match="built for 16x16"):
        model(torch.zeros(1, 3, 20, 20))
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        ViTConfig(image_size=30, patch_size=16)
    assert isinstance(model, VisionTransformer)

"""Swin: published sizes, Hugging Face as an oracle, what the shifted-window mask must do."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.gpu import count_parameters
from course_lib.interop import from_hf
from course_lib.models import create
from course_lib.models.swin import SwinBlock

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("name,millions", [("swin-t", 28), ("swin-s", 50), ("swin-b", 88)])
def test_presets_match_the_paper(name, millions):
    with torch.device("meta"):
        model = create(name)
    n = count_parameters(model)
    assert abs(n - millions * 1e6) <= 0.015 * millions * 1e6, f"{name}: {n / 1e6:.2f}M"


def test_windows_and_shifts_per_stage_follow_the_paper():
    with torch.device("meta"):
        model = create("swin-t")  # 224 px, patch 4: stages of 56, 28, 14, 7 tokens a side
    blocks = [[(b.window_size, b.shift_size) for b in stage.blocks] for stage in model.layers]
    assert blocks[0] == [(7, 0), (7, 3)]
    assert blocks[2] == [(7, 0), (7, 3)] * 3
    assert blocks[3] == [(7, 0), (7, 0)]  # map 7 <= window 7: no shift
    with torch.device("meta"):
        small = create("swin-t", image_size=64)  # stages of 16, 8, 4, 2
    assert [(b.window_size, b.shift_size) for b in small.layers[2].blocks] == [(4, 0)] * 6
    assert [(b.window_size, b.shift_size) for b in small.layers[3].blocks] == [(2, 0), (2, 0)]
    assert small.layers[0].downsample.reduction.weight.shape == (192, 384)


def _perturbed(hf_model):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return hf_model.eval()


@pytest.mark.parametrize(
    "image_size,patch_size,window_size,depths,num_heads",
    [
        (32, 2, 2, (2, 2, 2, 2), (1, 2, 2, 4)),  # four stages, shifts in the first three
        (40, 4, 4, (2, 2), (2, 2)),  # 10x10 and 5x5 maps: padding to the window, with shift
        (30, 4, 4, (2, 2), (1, 2)),  # image not divisible by the patch: padded to 32
    ],
)
def test_from_hf_swin_matches_outputs(image_size, patch_size, window_size, depths, num_heads):
    config = transformers.SwinConfig(
        image_size=image_size, patch_size=patch_size, embed_dim=8, depths=depths,
        num_heads=num_heads, window_size=window_size, num_labels=5, drop_path_rate=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    x = torch.randn(2, 3, image_size, image_size)
    hf_base = _perturbed(transformers.SwinModel(config))
    hf_cls = _perturbed(transformers.SwinForImageClassification(config))
    base, cls = from_hf(hf_base), from_hf(hf_cls)
    with torch.no_grad():
        out = hf_base(pixel_values=x)
        torch.testing.assert_close(
            base.forward_features(x).flatten(1, 2), out.last_hidden_state, rtol=0, atol=1e-5
        )
        torch.testing.assert_close(base(x), out.pooler_output, rtol=0, atol=1e-5)
        torch.testing.assert_close(cls(x), hf_cls(pixel_values=x).logits, rtol=0, atol=1e-5)


def _block(shift: int, ws: int = 4, dim: int = 8) -> SwinBlock:
    torch.manual_seed(0)
    block = SwinBlock(dim=dim, num_heads=2, window_size=ws, shift_size=shift).eval()
    with torch.no_grad():  # a visible bias, so a wrong bias lookup cannot hide
        block.attn.relative_position_bias_table.normal_()
    return block


def _changed(block: SwinBlock, x: torch.Tensor, y: int, x_: int) -> torch.Tensor:
    """Which positions (H, W) of the block's output move when input token (y, x_) is perturbed."""
    x2 = x.clone()
    x2[:, y, x_] += torch.randn(x.shape[-1], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return (block(x2) - block(x)).abs().amax(dim=(0, 3)) > 1e-6


def test_window_attention_is_local():
    x = torch.randn(1, 8, 8, 8)
    changed = _changed(_block(shift=0), x, 1, 2)  # token in the top-left 4x4 window
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[:4, :4] = True
    assert torch.equal(changed, expected)


def test_shifted_windows_do_not_mix_opposite_edges():
    """After the roll, the top-left corner shares a window with the bottom-right one; the mask
    must keep them apart, while genuine neighbours across the old window border do interact."""
    block = _block(shift=2)
    x = torch.randn(1, 8, 8, 8)
    changed = _changed(block, x, 0, 0)
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[:2, :2] = True  # the corner's region of its shifted window
    assert torch.equal(changed, expected)
    # Token (3, 3) sits in the shifted window covering rows/cols 2..5 of the image.
    changed = _changed(block, x, 3, 3)
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[2:6, 2:6] = True
    assert torch.equal(changed, expected)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(H=st.integers(1, 21), W=st.integers(1, 21))
def test_any_input_size_runs(H, W):
    """Sizes not divisible by the patch or the window are padded, never a crash."""
    model = create("swin-tiny", window_size=3).eval()  # 16 px preset, window 3
    with torch.no_grad():
        logits = model(torch.randn(1, 3, H, W))
    assert logits.shape == (1, 10) and torch.isfinite(logits).all()


def test_block_keeps_window_and_shift_consistent():
    with pytest.raises(ValueError, match="shift_size"):
        SwinBlock(dim=8, num_heads=2, window_size=4, shift_size=4)
    with pytest.raises(ValueError, match="differ in length"):
        create("swin-tiny", num_heads=(1, 2, 4))

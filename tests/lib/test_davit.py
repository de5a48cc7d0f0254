"""DaViT: published sizes, channel group attention against the paper's formula, its symmetry."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.gpu import count_parameters
from course_lib.models import create
from course_lib.models.davit import ChannelAttention, ChannelBlock, ConvPosEnc, SpatialBlock


@pytest.mark.parametrize("name,millions", [("davit-t", 28.3), ("davit-s", 49.7), ("davit-b", 87.9)])
def test_presets_match_table_1(name, millions):
    with torch.device("meta"):
        model = create(name)
    n = count_parameters(model)
    assert abs(n - millions * 1e6) <= 0.015 * millions * 1e6, f"{name}: {n / 1e6:.2f}M"


def test_stages_alternate_spatial_and_channel_blocks():
    with torch.device("meta"):
        model = create("davit-s")
    kinds = [[type(m).__name__ for m in stage] for stage in model.stages]
    assert kinds[0] == ["SpatialBlock", "ChannelBlock"]
    assert kinds[2] == ["Downsample"] + ["SpatialBlock", "ChannelBlock"] * 9
    assert model.stem.kernel_size == (7, 7) and model.stem.stride == (4, 4)
    groups = [
        m.attn.num_groups for stage in model.stages for m in stage if isinstance(m, ChannelBlock)
    ]
    assert groups[0] == 3 and groups[-1] == 24


def _reference_channel_attention(attn: ChannelAttention, x: torch.Tensor) -> torch.Tensor:
    """Eq. 3 of the paper, group by group:
    A(Q_g, K_g, V_g) = (softmax(Q_g^T K_g / sqrt(C_g)) V_g^T)^T."""
    B, N, C = x.shape
    G = attn.num_groups
    Cg = C // G
    q, k, v = attn.qkv(x).split(C, dim=-1)  # (B, N, C) each
    out = []
    for g in range(G):
        cols = slice(g * Cg, (g + 1) * Cg)
        Qg, Kg, Vg = q[..., cols], k[..., cols], v[..., cols]  # (B, N, Cg)
        A = torch.softmax(Qg.transpose(1, 2) @ Kg / math.sqrt(Cg), dim=-1)  # (B, Cg, Cg)
        out.append((A @ Vg.transpose(1, 2)).transpose(1, 2))  # (B, N, Cg)
    return attn.proj(torch.cat(out, dim=-1))


def test_channel_attention_equals_the_paper_formula():
    torch.manual_seed(0)
    attn = ChannelAttention(dim=12, num_groups=3)
    x = torch.randn(2, 10, 12)
    y, weights = attn(x, return_attn=True)
    torch.testing.assert_close(y, _reference_channel_attention(attn, x))
    assert weights.shape == (2, 3, 4, 4)  # a C_g x C_g matrix per group
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))


def test_channel_attention_is_permutation_equivariant_over_tokens():
    torch.manual_seed(0)
    attn = ChannelAttention(dim=8, num_groups=2)
    x = torch.randn(2, 12, 8)
    perm = torch.randperm(12)
    y, weights = attn(x, return_attn=True)
    y_perm, weights_perm = attn(x[:, perm], return_attn=True)
    torch.testing.assert_close(y_perm, y[:, perm])  # tokens move, outputs move with them
    torch.testing.assert_close(weights_perm, weights)  # the channel-to-channel weights do not


def test_channel_attention_sees_all_tokens_but_only_its_group():
    torch.manual_seed(0)
    attn = ChannelAttention(dim=8, num_groups=2)
    with torch.no_grad():  # q = k = v = x and no output mixing, to see the groups directly
        attn.qkv.weight.copy_(torch.eye(8).repeat(3, 1))
        attn.qkv.bias.zero_()
        attn.proj.weight.copy_(torch.eye(8))
    x = torch.randn(1, 6, 8)
    x2 = x.clone()
    x2[0, 0, :4] += 1.0  # perturb one token, in group 0 only
    delta = (attn(x2) - attn(x)).abs()[0]  # (N, C)
    assert (delta[:, :4] > 1e-6).all()  # every token of group 0 changes: a global receptive field
    assert (delta[:, 4:] < 1e-6).all()  # group 1 is untouched


def test_conv_position_encoding_is_a_depthwise_residual():
    torch.manual_seed(0)
    cpe = ConvPosEnc(dim=4)
    assert cpe.proj.groups == 4 and cpe.proj.kernel_size == (3, 3)
    x = torch.randn(1, 5, 5, 4)
    with torch.no_grad():
        cpe.proj.weight.zero_()
        cpe.proj.bias.zero_()
    torch.testing.assert_close(cpe(x), x)  # zero convolution: identity
    torch.manual_seed(1)
    cpe = ConvPosEnc(dim=4)
    x2 = x.clone()
    x2[0, 2, 2, 1] += 1.0
    delta = (cpe(x2) - cpe(x)).abs()[0]
    assert (delta[..., [0, 2, 3]] == 0).all()  # channels do not mix
    assert torch.equal(
        delta[..., 1] > 0, torch.nn.functional.pad(torch.ones(3, 3), (1, 1, 1, 1)) > 0
    )


def test_spatial_block_without_position_encoding_is_window_local():
    torch.manual_seed(0)
    block = SpatialBlock(dim=8, num_heads=2, window_size=3).eval()
    block.cpe1, block.cpe2 = torch.nn.Identity(), torch.nn.Identity()
    x = torch.randn(1, 6, 6, 8)
    x2 = x.clone()
    x2[0, 4, 1] += torch.randn(8)
    with torch.no_grad():
        changed = (block(x2) - block(x)).abs().amax(dim=(0, 3)) > 1e-6
    expected = torch.zeros(6, 6, dtype=torch.bool)
    expected[3:, :3] = True  # the bottom-left 3x3 window
    assert torch.equal(changed, expected)


@pytest.mark.parametrize("H,W", [(16, 16), (13, 11), (3, 5)])
def test_any_input_size_runs(H, W):
    model = create("davit-tiny").eval()  # window 2; sizes not divisible are padded
    with torch.no_grad():
        logits = model(torch.randn(2, 3, H, W))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


def test_clear_errors():
    with pytest.raises(ValueError, match="equal lengths"):
        create("davit-tiny", depths=(1, 1, 1))
    with pytest.raises(ValueError, match="not divisible by num_groups"):
        ChannelAttention(dim=10, num_groups=3)
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        create("davit-tiny")(torch.zeros(1, 1, 16, 16))

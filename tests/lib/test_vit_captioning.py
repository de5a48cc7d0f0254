"""The encoder-decoder captioners against torch.nn's Transformer layers (weights copied)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models import create


def _copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_norms_ff(ours, theirs, norms) -> None:
    for name in norms:
        getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
        getattr(theirs, name).bias.copy_(getattr(ours, name).bias)
    theirs.linear1.weight.copy_(ours.ff.fc1.weight)
    theirs.linear1.bias.copy_(ours.ff.fc1.bias)
    theirs.linear2.weight.copy_(ours.ff.fc2.weight)
    theirs.linear2.bias.copy_(ours.ff.fc2.bias)


def _layer_kwargs(cfg):
    return dict(
        d_model=cfg.d_model,
        nhead=cfg.num_heads,
        dim_feedforward=cfg.d_ff,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        layer_norm_eps=cfg.norm_eps,
    )


@torch.no_grad()
def _oracle_memory(model, images):
    """Patches by F.unfold, torch.nn.TransformerEncoderLayer blocks, a final layer norm."""
    cfg = model.config
    P = cfg.patch_size
    conv = model.patch_embed.proj
    columns = F.unfold(images, kernel_size=P, stride=P).transpose(1, 2)  # (B, L, C_in*P*P)
    x = columns @ conv.weight.flatten(1).T + conv.bias + model.pos_embed
    for ours in model.encoder_blocks:
        layer = nn.TransformerEncoderLayer(**_layer_kwargs(cfg)).eval()
        _copy_attention(ours.self_attn, layer.self_attn)
        _copy_norms_ff(ours, layer, ("norm1", "norm2"))
        x = layer(x)
    return F.layer_norm(x, (cfg.d_model,), model.ln_memory.weight, model.ln_memory.bias)


@torch.no_grad()
def _oracle_logits(model, memory, tokens):
    cfg = model.config
    T = tokens.shape[1]
    y = model.wte.weight[tokens] + model.wpe.weight[:T]
    causal = nn.Transformer.generate_square_subsequent_mask(T)
    for ours in model.blocks:
        layer = nn.TransformerDecoderLayer(**_layer_kwargs(cfg)).eval()
        _copy_attention(ours.self_attn, layer.self_attn)
        _copy_attention(ours.cross_attn, layer.multihead_attn)
        _copy_norms_ff(ours, layer, ("norm1", "norm2", "norm3"))
        y = layer(y, memory, tgt_mask=causal)
    y = F.layer_norm(y, (cfg.d_model,), model.ln_f.weight, model.ln_f.bias)
    return model.lm_head(y)


def _model(name, **overrides):
    torch.manual_seed(0)
    small = dict(d_model=16, num_heads=2, d_ff=32, image_size=16, vocab_size=11)
    return create(name, **{**small, **overrides}).eval()


def _batch(model, T=6):
    g = torch.Generator().manual_seed(0)
    images = torch.rand(3, 3, model.config.image_size, model.config.image_size, generator=g)
    tokens = torch.randint(3, model.config.vocab_size, (3, T), generator=g)
    tokens[:, 0] = model.config.bos_id
    return images, tokens


def test_vit_captioner_matches_torch_transformer_layers():
    model = _model("caption-vit", patch_size=4)
    images, tokens = _batch(model)
    memory, grid = model.encode(images)
    assert grid == (4, 4) and memory.shape == (3, 16, 16)
    torch.testing.assert_close(memory, _oracle_memory(model, images), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        logits = model(images, tokens)
    torch.testing.assert_close(
        logits, _oracle_logits(model, _oracle_memory(model, images), tokens), atol=1e-5, rtol=1e-5
    )


def test_cnn_stem_encoder_matches_torch_layers_over_the_coordconv_grid():
    model = _model("caption-cnn-encoder", cnn_layers=2, channels=8)
    images, tokens = _batch(model)
    with torch.no_grad():
        grid = model.cnn(images)  # (B, 8, 4, 4)
        x = grid.flatten(2).transpose(1, 2) @ model.memory_proj.weight.T + model.memory_proj.bias
        for ours in model.encoder_blocks:
            layer = nn.TransformerEncoderLayer(**_layer_kwargs(model.config)).eval()
            _copy_attention(ours.self_attn, layer.self_attn)
            _copy_norms_ff(ours, layer, ("norm1", "norm2"))
            x = layer(x)
        expected = F.layer_norm(x, (16,), model.ln_memory.weight, model.ln_memory.bias)
        memory, _ = model.encode(images)
        torch.testing.assert_close(memory, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            model(images, tokens), _oracle_logits(model, expected, tokens), atol=1e-5, rtol=1e-5
        )


def test_encoder_mixes_patches_and_positions_matter():
    model = _model("caption-vit", patch_size=4)
    images, _ = _batch(model)
    edited = images.clone()
    edited[:, :, :4, :4] = 0.0  # change only the first patch
    with torch.no_grad():
        before, _ = model.encode(images)
        after, _ = model.encode(edited)
        shallow = _model("caption-vit", patch_size=4, num_encoder_layers=0)
        b0, _ = shallow.encode(images)
        a0, _ = shallow.encode(edited)
    # with an encoder, the last patch's memory sees the first patch; without one it does not
    assert (before[:, -1] - after[:, -1]).abs().max() > 1e-4
    torch.testing.assert_close(b0[:, 1:], a0[:, 1:])


@pytest.mark.parametrize("name", ["caption-vit", "caption-cnn-encoder"])
def test_generate_and_attention_maps(name):
    model = _model(name)
    images, _ = _batch(model)
    tokens, maps = model.generate(images, max_len=5, return_attn=True)
    assert tokens.shape[0] == 3 and tokens.shape[1] <= 5
    assert maps.shape[-2:] == (4, 4)
    torch.testing.assert_close(maps.sum((-2, -1)), torch.ones(maps.shape[:2]))
    _, _, enc = model.encode(images, return_attn=True)
    assert len(enc) == model.config.num_encoder_layers and enc[0].shape == (3, 2, 16, 16)
    with pytest.raises(ValueError, match="stem"):
        create(name, stem="rnn")

"""ViLBERT: co-attention wiring, region plumbing (grid and crops), masks and symmetries."""

from __future__ import annotations

import pytest
import torch

from course_lib.models import create
from course_lib.models.vilbert import (
    CoAttentionLayer,
    ViLBertConfig,
    crop_regions,
    grid_regions,
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return create("vilbert-tiny", num_co_layers=2).eval()


def _inputs(B=2, T=7, R=5, F=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(64, (B, T), generator=g),
        torch.randn(B, R, F, generator=g),
        torch.rand(B, R, 5, generator=g),
    )


def test_each_stream_attends_to_the_other_one():
    torch.manual_seed(0)
    config = create("vilbert-tiny").config
    layer = CoAttentionLayer(config).eval()
    text, image = torch.randn(2, 6, 32), torch.randn(2, 4, 32)
    t, i, (t2i, i2t) = layer(text, image, return_attn=True)
    assert t2i.shape == (2, 2, 6, 4) and i2t.shape == (2, 2, 4, 6)  # (B, H, T_q, T_k)
    # the text queries attend over image positions only: text tokens do not see each other,
    # so changing one text token leaves the others' outputs unchanged ...
    text2 = text.clone()
    text2[:, 0] += 1.0
    t_b, i_b, _ = layer(text2, image)
    torch.testing.assert_close(t_b[:, 1:], t[:, 1:], atol=1e-6, rtol=0)
    # ... while every image position reads from the text
    assert (i_b - i).abs().amax(dim=-1).min() > 0


def test_masked_regions_and_tokens_get_no_attention(model):
    ids, feats, boxes = _inputs()
    region_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).bool()
    attention_mask = torch.tensor([[1] * 5 + [0] * 2, [1] * 7]).bool()
    out = model(
        ids, feats, boxes, attention_mask=attention_mask, region_mask=region_mask,
        return_attn=True,
    )  # fmt: skip
    for t2i, i2t in out.co_attentions:
        assert torch.all(t2i[0, :, :, 4:] == 0)  # regions 3, 4 are positions 4, 5 after [IMG]
        assert torch.all(i2t[0, :, :, 5:] == 0)
        torch.testing.assert_close(t2i.sum(-1), torch.ones_like(t2i.sum(-1)))
    # padded regions' features do not matter
    feats2 = feats.clone()
    feats2[0, 3:] = 100.0
    out2 = model(ids, feats2, boxes, attention_mask=attention_mask, region_mask=region_mask)
    torch.testing.assert_close(out2.alignment_logits, out.alignment_logits, atol=1e-5, rtol=0)


def test_permuting_regions_permutes_the_image_stream_only(model):
    """Regions are a set: without positions, only their boxes say where they are."""
    ids, feats, boxes = _inputs()
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        a = model(ids, feats, boxes)
        b = model(ids, feats[:, perm], boxes[:, perm])
    torch.testing.assert_close(b.alignment_logits, a.alignment_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(b.text, a.text, atol=1e-5, rtol=0)
    torch.testing.assert_close(b.image[:, 1:], a.image[:, 1:][:, perm], atol=1e-5, rtol=0)


def test_fused_and_manual_attention_agree(model):
    manual = create("vilbert-tiny", num_co_layers=2, fused_attn=False).eval()
    manual.load_state_dict(model.state_dict())
    ids, feats, boxes = _inputs()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool()
    a = model(ids, feats, boxes, region_mask=mask)
    b = manual(ids, feats, boxes, region_mask=mask)
    torch.testing.assert_close(a.alignment_logits, b.alignment_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.image, b.image, atol=1e-5, rtol=0)


def test_grid_regions_row_major_with_cell_boxes():
    fmap = torch.arange(2 * 3 * 2 * 4, dtype=torch.float).reshape(2, 3, 2, 4)  # (B, F, h, w)
    regions, boxes = grid_regions(fmap)
    assert regions.shape == (2, 8, 3) and boxes.shape == (2, 8, 5)
    assert torch.equal(regions[1, 5], fmap[1, :, 1, 1])  # cell (row 1, col 1) is region 5
    torch.testing.assert_close(boxes[0, 5], torch.tensor([0.25, 0.5, 0.5, 1.0, 0.125]))


def test_crop_regions_samples_the_box():
    image = torch.arange(2 * 3 * 16 * 16, dtype=torch.float).reshape(2, 3, 16, 16)
    boxes = torch.tensor([[[4, 2, 8, 6]], [[0, 0, 16, 16]]])  # (B, N, 4): x0, y0, x1, y1
    feats, locations = crop_regions(image, boxes, size=4)
    assert feats.shape == (2, 1, 48)
    # a 4x4 box sampled on 4x4 bin centres is exactly its pixels
    assert torch.equal(feats[0, 0].reshape(3, 4, 4), image[0, :, 2:6, 4:8])
    torch.testing.assert_close(locations[0, 0], torch.tensor([0.25, 0.125, 0.5, 0.375, 1 / 16]))
    torch.testing.assert_close(locations[1, 0], torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0]))


def test_wrong_feature_size_is_explained(model):
    ids, feats, boxes = _inputs(F=10)
    with pytest.raises(ValueError, match="v_feature_size"):
        model(ids, feats, boxes)


def test_config_streams_share_the_text_settings():
    config = ViLBertConfig(hidden_size=48, num_attention_heads=4, v_hidden_size=24)
    assert config.text_config().hidden_size == 48 and config.image_config().hidden_size == 24

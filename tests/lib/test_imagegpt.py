"""ImageGPT (Chen et al. 2020): palettes, quantisation, causality, completion."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.models import create
from course_lib.models.imagegpt import (
    ImageGPT,
    bits_per_pixel,
    dequantize,
    grey_palette,
    kmeans_palette,
    quantize,
)

SMALL = dict(height=6, width=6, palette_size=5, n_layer=2, n_head=2, n_embd=32)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: one thread beats two that wait for each other on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(**overrides) -> ImageGPT:
    torch.manual_seed(0)
    return create("imagegpt-digits", **{**SMALL, **overrides}).eval()


def _tokens(batch_size: int = 3, T: int = 36, K: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randint(K, (batch_size, T), generator=torch.Generator().manual_seed(seed))


def test_quantize_dequantize_round_trip_on_palette_colours():
    generator = torch.Generator().manual_seed(0)
    for palette in (grey_palette(8), torch.rand(6, 3, generator=generator)):
        tokens = torch.randint(len(palette), (2, 20), generator=generator)
        images = dequantize(tokens, palette, height=4, width=5)
        assert images.shape == (2, palette.shape[1], 4, 5)
        assert torch.equal(quantize(images, palette), tokens)
        assert torch.equal(
            dequantize(quantize(images, palette), palette, height=4, width=5), images
        )


def test_quantize_uses_raster_order_and_the_nearest_colour():
    palette = grey_palette(3)  # 0, 0.5, 1
    image = torch.tensor([[[[0.1, 0.3], [0.74, 0.9]]]])  # (1, 1, 2, 2)
    assert quantize(image, palette).tolist() == [[0, 1, 1, 2]]


def test_kmeans_palette_is_deterministic_and_finds_separated_clusters():
    generator = torch.Generator().manual_seed(0)
    true_centres = torch.tensor([[0.1, 0.1, 0.1], [0.5, 0.9, 0.2], [0.9, 0.2, 0.7]])
    pixels = true_centres.repeat_interleave(200, dim=0)
    pixels = pixels + 0.02 * torch.randn(pixels.shape, generator=generator)
    palette = kmeans_palette(pixels, 3, seed=0)
    assert torch.equal(palette, kmeans_palette(pixels, 3, seed=0))
    torch.testing.assert_close(palette, true_centres, atol=0.01, rtol=0)  # sorted by channel 0
    assert torch.equal(kmeans_palette(true_centres, 3), true_centres)  # k == N: exact
    with pytest.raises(ValueError, match="k must be"):
        kmeans_palette(pixels, 0)


def test_shapes_and_untrained_loss_is_near_uniform():
    model = _model()
    tokens = _tokens()
    assert model(tokens).shape == (3, 36, 5)
    assert model(tokens[:, :10]).shape == (3, 10, 5)
    # Small initial weights: the model starts close to log2(K) bits per pixel.
    assert bits_per_pixel(model, tokens) == pytest.approx(math.log2(5), rel=0.1)


@pytest.mark.parametrize("fused", [True, False])
def test_changing_later_pixels_leaves_earlier_logits_unchanged(fused):
    model = _model(fused_attn=fused)
    tokens = _tokens()
    logits = model(tokens)
    for j in (0, 17, 35):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % 5
        new = model(changed)
        # logits[:, t] predicts x_t from x_<t: positions t <= j cannot see x_j.
        torch.testing.assert_close(new[:, : j + 1], logits[:, : j + 1], atol=0, rtol=0)
        if j < 35:
            assert not torch.allclose(new[:, j + 1 :], logits[:, j + 1 :])


def test_completion_keeps_the_upper_half_and_is_reproducible():
    model = _model()
    given = _tokens(T=18)  # upper half of a 6x6 image
    out = model.complete(given, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 36)
    assert torch.equal(out[:, :18], given)
    assert 0 <= int(out.min()) and int(out.max()) < 5
    again = model.complete(given, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert torch.equal(model.complete(_tokens()), _tokens())  # nothing left to complete


def test_cached_greedy_completion_equals_recomputing_the_prefix():
    model = _model()
    given = _tokens(T=10)
    cached = model.complete(given, greedy=True)
    tokens = given
    while tokens.shape[1] < 36:  # the slow way: full forward pass for every new pixel
        padded = torch.cat([tokens, torch.zeros_like(tokens[:, :1])], dim=1)
        tokens = torch.cat([tokens, model(padded)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, tokens)


def test_training_lowers_bits_per_pixel_on_a_tiny_batch():
    model = _model().train()
    tokens = _tokens(batch_size=4)
    before = bits_per_pixel(model, tokens)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(30):
        loss = model.loss(tokens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert bits_per_pixel(model, tokens) < 0.6 * before


def test_bad_inputs_get_clear_errors():
    model = _model()
    with pytest.raises(ValueError, match="palette indices"):
        model(torch.full((1, 4), 5))
    with pytest.raises(ValueError, match="exceed"):
        model(torch.zeros(1, 37, dtype=torch.long))
    with pytest.raises(ValueError, match="int64"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="same C"):
        quantize(torch.rand(1, 3, 2, 2), grey_palette(4))
    with pytest.raises(ValueError, match="cannot form"):
        dequantize(torch.zeros(1, 5, dtype=torch.long), grey_palette(4), height=2, width=2)
    with pytest.raises(ValueError, match="temperature"):
        model.complete(_tokens(T=4), temperature=0.0)

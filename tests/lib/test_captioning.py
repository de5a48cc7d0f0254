"""Captioning with attention: the RNN captioner (Xu et al. 2015) and the transformer captioner."""

from __future__ import annotations

import pytest
import torch

from course_lib.data.scenes import SceneDataset, scene_vocab
from course_lib.models import create
from course_lib.models.captioning import (
    CaptionConfig,
    ShowAttendTell,
    box_cell_mask,
    caption_loss,
    doubly_stochastic_penalty,
    greedy_decode,
)
from course_lib.models.transformer_captioning import TransformerCaptionConfig

SMALL_RNN = dict(channels=16, cnn_layers=2, embed_dim=16, hidden_dim=32, attention_dim=16)
SMALL_TRANSFORMER = dict(channels=16, cnn_layers=2, d_model=32, num_heads=2, num_layers=2, d_ff=64)
MODELS = [
    ("caption-rnn-attn", SMALL_RNN),
    ("caption-rnn-attn-lstm", SMALL_RNN),
    ("caption-transformer", SMALL_TRANSFORMER),
]
IDS = [name for name, _ in MODELS]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: one thread beats two that wait for each other on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _build(name: str, overrides: dict, **more) -> torch.nn.Module:
    torch.manual_seed(0)
    return create(name, **overrides, **more).eval()


def _inputs(batch_size: int = 3, T: int = 6, side: int = 16, vocab_size: int = 19):
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(batch_size, 3, side, side, generator=generator)
    tokens = torch.randint(4, vocab_size, (batch_size, T), generator=generator)
    tokens[:, 0] = 1  # BOS
    return images, tokens


def test_default_vocab_size_is_the_scene_vocabulary():
    assert CaptionConfig().vocab_size == len(scene_vocab())
    assert TransformerCaptionConfig().vocab_size == len(scene_vocab())
    vocab = scene_vocab()
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    assert (CaptionConfig().pad_id, CaptionConfig().bos_id, CaptionConfig().eos_id) == (0, 1, 2)


@pytest.mark.parametrize(("name", "overrides"), MODELS, ids=IDS)
def test_shapes_and_attention_is_a_distribution_over_the_grid(name, overrides):
    model = _build(name, overrides)
    images, tokens = _inputs()  # 16x16 images, two pools -> a 4x4 grid
    logits = model(images, tokens)
    assert logits.shape == (3, 6, 19)
    logits2, attn = model(images, tokens, return_attn=True)
    torch.testing.assert_close(logits2, logits)
    assert attn.shape == (3, 6, 4, 4)
    assert (attn >= 0).all()
    torch.testing.assert_close(attn.sum(dim=(-2, -1)), torch.ones(3, 6))


@pytest.mark.parametrize(("name", "overrides"), MODELS, ids=IDS)
def test_greedy_decoding_agrees_with_teacher_forcing_on_its_own_output(name, overrides):
    """Step-by-step decoding and the parallel teacher-forced pass must compute the same thing."""
    model = _build(name, overrides, max_len=7)
    images, _ = _inputs()
    tokens, attn = model.generate(images, return_attn=True)
    assert tokens.shape[0] == 3 and 1 <= tokens.shape[1] <= 7
    assert attn.shape == (3, tokens.shape[1], 4, 4)
    inputs = torch.cat([torch.ones(3, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    logits, attn_tf = model(images, inputs, return_attn=True)
    # Before each row's EOS, the arg-max of the teacher-forced logits is the generated word.
    first_eos = [(row == 2).nonzero()[0].item() if (row == 2).any() else len(row) for row in tokens]
    for b, stop in enumerate(first_eos):
        n = min(stop + 1, tokens.shape[1])
        assert torch.equal(logits[b, :n].argmax(-1), tokens[b, :n])
        torch.testing.assert_close(attn[b, :n], attn_tf[b, :n], atol=1e-5, rtol=1e-4)


def test_greedy_decode_stops_at_eos_and_pads_after_it():
    # Scripted next words: row 0 says 5, EOS; row 1 says 6, 7, 8, EOS; then anything.
    script = torch.tensor([[5, 2, 9, 9, 9, 9], [6, 7, 8, 2, 9, 9]])
    calls = []

    def step(prefix):
        t = prefix.shape[1] - 1
        calls.append(t)
        logits = torch.full((2, 10), -5.0)
        logits[torch.arange(2), script[:, t]] = 5.0
        return logits, torch.full((2, 3), 1 / 3)

    tokens, attn = greedy_decode(step, batch_size=2, max_len=6, bos_id=1, eos_id=2, pad_id=0)
    assert tokens.tolist() == [[5, 2, 0, 0], [6, 7, 8, 2]]
    assert calls == [0, 1, 2, 3]  # stopped as soon as every row had its EOS
    assert attn.shape == (2, 4, 3)
    assert (attn[0, 2:] == 0).all() and (attn[1] > 0).all()  # no attention after EOS


@pytest.mark.parametrize(("name", "overrides"), MODELS, ids=IDS)
def test_models_stop_at_eos(name, overrides):
    model = _build(name, overrides)
    head = model.L_o if isinstance(model, ShowAttendTell) else model.lm_head
    with torch.no_grad():
        head.bias.zero_()
        head.bias[2] = 1e4  # EOS wins every step
    images, _ = _inputs()
    tokens = model.generate(images)
    assert tokens.tolist() == [[2], [2], [2]]


@pytest.mark.parametrize(("name", "overrides"), MODELS, ids=IDS)
def test_teacher_forced_loss_decreases_on_a_tiny_batch(name, overrides):
    data = SceneDataset(4, seed=0, size=16, max_objects=2)
    batch = data.collate([data[i] for i in range(4)])
    torch.manual_seed(0)
    model = create(name, **overrides).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    caption = batch["caption"]
    losses = []
    for _ in range(40):
        logits = model(batch["image"], caption[:, :-1])
        loss = caption_loss(logits, caption[:, 1:], pad_id=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses[::5]


def test_precomputed_keys_give_the_same_attention_as_additive_attention():
    model = _build("caption-rnn-attn", SMALL_RNN)
    images, _ = _inputs()
    annotations, _ = model.encode(images)  # (B, L, C)
    s_prev = torch.randn(3, SMALL_RNN["hidden_dim"])
    keys = model.attention.key_proj(annotations)
    z, alpha = model.attend(s_prev, annotations, keys)
    z_ref, alpha_ref = model.attention(s_prev, annotations)
    torch.testing.assert_close(alpha, alpha_ref)
    torch.testing.assert_close(z, z_ref)


def test_transformer_captioner_is_causal_and_fused_matches_manual():
    model = _build("caption-transformer", SMALL_TRANSFORMER)
    images, tokens = _inputs()
    logits = model(images, tokens)
    changed = tokens.clone()
    changed[:, 4:] = 3
    logits_changed = model(images, changed)
    torch.testing.assert_close(logits_changed[:, :4], logits[:, :4])
    assert not torch.allclose(logits_changed[:, 4:], logits[:, 4:])
    manual = _build("caption-transformer", SMALL_TRANSFORMER, fused_attn=False)
    torch.testing.assert_close(manual(images, tokens), logits, atol=1e-5, rtol=1e-5)


def test_caption_loss_ignores_padding():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
    changed = logits.clone()
    changed[0, 2] += 10.0  # a padded position
    assert torch.equal(
        caption_loss(changed, targets, pad_id=0), caption_loss(logits, targets, pad_id=0)
    )
    with pytest.raises(ValueError, match="disagree"):
        caption_loss(logits, targets[:, :2], pad_id=0)


def test_box_cell_mask_marks_cells_whose_centre_is_inside():
    # 16-pixel image, 4x4 grid: cell centres at 2, 6, 10, 14.
    boxes = torch.tensor([[0.0, 0.0, 7.0, 3.0], [9.0, 5.0, 16.0, 16.0]])
    mask = box_cell_mask(boxes, grid_size=(4, 4), image_size=16)
    expected0 = torch.zeros(4, 4, dtype=torch.bool)
    expected0[0, :2] = True  # rows with centre 2; columns with centres 2 and 6
    expected1 = torch.zeros(4, 4, dtype=torch.bool)
    expected1[1:, 2:] = True
    assert torch.equal(mask, torch.stack([expected0, expected1]))


def test_doubly_stochastic_penalty_is_zero_when_every_cell_gets_attention_once():
    eye = torch.eye(4).view(1, 4, 2, 2)  # step t looks only at cell t
    assert doubly_stochastic_penalty(eye).item() == 0.0
    uniform_once = torch.full((1, 1, 2, 2), 0.25)  # one step spread thin: each cell 1/4 short
    assert doubly_stochastic_penalty(uniform_once).item() == pytest.approx(4 * 0.75**2)
    mask = torch.tensor([[True, True, False, False]])
    assert doubly_stochastic_penalty(eye, mask).item() == pytest.approx(2.0)


def test_bad_inputs_get_clear_errors():
    model = _build("caption-rnn-attn", SMALL_RNN)
    images, tokens = _inputs()
    with pytest.raises(ValueError, match="divisible"):
        model(torch.rand(1, 3, 15, 15), tokens[:1])
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        model(torch.rand(1, 1, 16, 16), tokens[:1])
    with pytest.raises(ValueError, match="tokens must be"):
        model(images, tokens[:2])
    with pytest.raises(ValueError, match="rnn must be"):
        create("caption-rnn-attn", rnn="transformer")
    transformer = _build("caption-transformer", SMALL_TRANSFORMER, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        transformer(images, tokens)

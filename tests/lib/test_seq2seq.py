"""GRU encoder-decoder and Bahdanau attention: padding, teacher forcing, greedy, the bottleneck."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_lib.data.dates import DateDataset
from course_lib.models import create
from course_lib.models.seq2seq import Seq2Seq, Seq2SeqConfig, reverse_padded

SMALL = dict(embed_dim=16, hidden_dim=24, attention_dim=20)


def model(name: str, **overrides) -> Seq2Seq:
    torch.manual_seed(0)
    return create(name, **{**SMALL, **overrides}).eval()


def padded_batch():
    data = DateDataset(4, seed=3)
    return data, data.collate([data[i] for i in range(4)])


def test_presets_follow_the_papers():
    gru, bahdanau = create("seq2seq-gru"), create("seq2seq-bahdanau")
    assert not gru.config.attention and not gru.config.bidirectional
    assert gru.decoder.attention is None
    assert bahdanau.config.attention and bahdanau.config.bidirectional
    assert isinstance(bahdanau, Seq2Seq) and isinstance(bahdanau.config, Seq2SeqConfig)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_encoder_final_state_is_last_real_token(bidirectional):
    m = model("seq2seq-gru", bidirectional=bidirectional)
    _, batch = padded_batch()
    h, c, mask = m.encode(batch["src"], batch["src_lengths"])
    H = SMALL["hidden_dim"]
    for b, n in enumerate(batch["src_lengths"].tolist()):
        torch.testing.assert_close(c[b, :H], h[b, n - 1, :H])  # forward direction: h_T
        if bidirectional:
            torch.testing.assert_close(c[b, H:], h[b, 0, H:])  # backward direction: its h_1
        assert (h[b, n:] == 0).all() and mask[b].sum() == n


def test_reverse_padded():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    lengths = torch.tensor([3, 2])
    assert reverse_padded(x, lengths).tolist() == [[3, 2, 1, 0], [5, 4, 0, 0]]
    y = torch.randn(2, 4, 3)
    assert torch.equal(reverse_padded(reverse_padded(y, lengths), lengths), y)


def test_encoder_equals_packed_bidirectional_torch_gru():
    m = model("seq2seq-bahdanau")
    _, batch = padded_batch()
    reference = nn.GRU(
        SMALL["embed_dim"], SMALL["hidden_dim"], batch_first=True, bidirectional=True
    )
    with torch.no_grad():
        for name, value in m.encoder.rnn.named_parameters():
            getattr(reference, name).copy_(value)
        for name, value in m.encoder.rnn_backward.named_parameters():
            getattr(reference, f"{name}_reverse").copy_(value)
        x = m.encoder.embedding(batch["src"])
        packed = pack_padded_sequence(
            x, batch["src_lengths"], batch_first=True, enforce_sorted=False
        )
        out, h_n = reference(packed)
        expected_h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        h, c = m.encoder(batch["src"], batch["src_lengths"])
    torch.testing.assert_close(h, expected_h)
    torch.testing.assert_close(c, torch.cat([h_n[0], h_n[1]], dim=-1))


@pytest.mark.parametrize("name", ["seq2seq-gru", "seq2seq-bahdanau"])
def test_padding_does_not_change_results(name):
    m = model(name)
    _, batch = padded_batch()
    logits = m(batch["src"], batch["tgt_in"], src_lengths=batch["src_lengths"])
    for b, n in enumerate(batch["src_lengths"].tolist()):
        alone = m(batch["src"][b : b + 1, :n], batch["tgt_in"][b : b + 1])
        torch.testing.assert_close(logits[b : b + 1], alone, atol=1e-5, rtol=1e-5)
    # lengths default to the count of non-padding tokens
    torch.testing.assert_close(m(batch["src"], batch["tgt_in"]), logits)


@pytest.mark.parametrize("name", ["seq2seq-gru", "seq2seq-bahdanau"])
def test_greedy_equals_argmax_of_teacher_forcing_on_its_own_output(name):
    m = model(name)
    _, batch = padded_batch()
    tokens = m.greedy_decode(batch["src"], max_len=6)
    assert tokens.shape[0] == 4 and tokens.shape[1] <= 6
    tgt_in = torch.cat([torch.full((4, 1), m.config.bos_id), tokens[:, :-1]], dim=1)
    logits = m(batch["src"], tgt_in)
    first_eos = [
        (row == m.config.eos_id).nonzero()[0, 0].item() if (row == 2).any() else len(row)
        for row in tokens
    ]
    for b, stop in enumerate(first_eos):
        upto = min(stop + 1, tokens.shape[1])
        assert torch.equal(logits[b, :upto].argmax(-1), tokens[b, :upto])
        assert (tokens[b, upto:] == m.config.pad_id).all()


def test_attention_weights_for_heatmaps():
    m = model("seq2seq-bahdanau")
    _, batch = padded_batch()
    logits, weights = m(batch["src"], batch["tgt_in"], return_attention=True)
    B, T_out, T_in = *batch["tgt_in"].shape, batch["src"].shape[1]
    assert weights.shape == (B, T_out, T_in)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T_out))
    for b, n in enumerate(batch["src_lengths"].tolist()):
        assert (weights[b, :, n:] == 0).all()
    tokens, greedy_weights = m.greedy_decode(batch["src"], max_len=5, return_attention=True)
    assert greedy_weights.shape == (B, tokens.shape[1], T_in)
    _, none = model("seq2seq-gru")(batch["src"], batch["tgt_in"], return_attention=True)
    assert none is None


def test_precomputed_keys_equal_the_additive_attention_module():
    m = model("seq2seq-bahdanau")
    _, batch = padded_batch()
    h, c, mask = m.encode(batch["src"], batch["src_lengths"])
    s = torch.randn(4, SMALL["hidden_dim"])
    context, weights = m.decoder.attend(s, h, m.decoder.precompute(h), mask)
    expected_context, expected_weights = m.decoder.attention(s, h, mask=mask)
    torch.testing.assert_close(context, expected_context)
    torch.testing.assert_close(weights, expected_weights)


def test_fixed_context_decoder_sees_the_source_only_through_c():
    m = model("seq2seq-gru")
    _, batch = padded_batch()
    h, c, mask = m.encode(batch["src"])
    s = m.decoder.initial_state(c)
    y = batch["tgt_in"][:, 0]
    logits, _, _ = m.decoder.step(y, s, h, mask, c)
    other, _, _ = m.decoder.step(y, s, torch.randn_like(h), mask, c)
    torch.testing.assert_close(logits, other)
    changed, _, _ = m.decoder.step(y, s, h, mask, torch.randn_like(c))
    assert not torch.allclose(logits, changed)


def test_learns_a_few_dates():
    torch.manual_seed(0)
    data, batch = padded_batch()
    m = create("seq2seq-bahdanau", **SMALL)
    optimizer = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(50):
        loss = m.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    tokens = m.eval().greedy_decode(batch["src"], max_len=12)
    assert [data.decode_target(row) for row in tokens] == [t for _, t in data.pairs]


def test_bad_inputs_have_clear_errors():
    m = model("seq2seq-gru")
    with pytest.raises(ValueError, match="at least one token"):
        m(torch.tensor([[0, 0]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match=r"\(B, T_in\)"):
        m(torch.tensor([5, 6]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="dropout"):
        Seq2SeqConfig(dropout=1.5)
    with pytest.raises(TypeError, match="unknown Seq2SeqConfig field.*hidden_dim"):
        create("seq2seq-gru", hidden_size=8)

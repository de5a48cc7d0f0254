"""BERT: Hugging Face oracle, padding, tied MLM head, presets; MLM masking (15%, 80/10/10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.interop import from_hf
from course_lib.masking import IGNORE_INDEX, mask_tokens
from course_lib.models import create
from course_lib.models.bert import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
)

transformers = pytest.importorskip("transformers")


def _hf_config(**overrides):
    return transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, initializer_range=0.1, **overrides,
    )  # fmt: skip


def _inputs(B: int = 3, T: int = 12):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(100, (B, T), generator=g)
    token_type_ids = (torch.arange(T) >= T // 2).long().expand(B, T)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, 8:] = 0  # padded sequences
    attention_mask[2, 5:] = 0
    return input_ids, token_type_ids, attention_mask


@pytest.mark.parametrize("kind", ["BertForPreTraining", "BertModel", "BertForMaskedLM"])
def test_from_hf_bert_matches_hugging_face(kind):
    torch.manual_seed(0)
    hf = getattr(transformers, kind)(_hf_config()).eval()
    ours = from_hf(hf).eval()
    ids, segments, mask = _inputs()
    with torch.no_grad():
        expected = hf(ids, token_type_ids=segments, attention_mask=mask, output_hidden_states=True)
        got = ours(ids, token_type_ids=segments, attention_mask=mask)
    close = dict(atol=1e-5, rtol=0)
    if kind == "BertModel":
        torch.testing.assert_close(got.hidden, expected.last_hidden_state, **close)
        torch.testing.assert_close(got.pooled, expected.pooler_output, **close)
    elif kind == "BertForPreTraining":
        torch.testing.assert_close(got[0], expected.prediction_logits, **close)
        torch.testing.assert_close(got[1], expected.seq_relationship_logits, **close)
        hidden = ours.bert(ids, token_type_ids=segments, attention_mask=mask).hidden
        torch.testing.assert_close(hidden, expected.hidden_states[-1], **close)
    else:
        torch.testing.assert_close(got, expected.logits, **close)


def test_mlm_decoder_is_tied_to_the_token_embedding():
    model = create("bert-tiny-pretraining")
    assert model.mlm.decoder.weight is model.bert.embeddings.word_embeddings.weight
    unique = sum(p.numel() for p in model.parameters())  # parameters() de-duplicates
    assert unique == sum(p.numel() for n, p in model.named_parameters())


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    model = create("bert-tiny").eval()
    ids = torch.randint(7, 128, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 4)], dim=1).bool()
    with torch.no_grad():
        short, long = model(ids), model(padded, attention_mask=mask)
    torch.testing.assert_close(long.hidden[:, :6], short.hidden, atol=1e-5, rtol=0)
    torch.testing.assert_close(long.pooled, short.pooled, atol=1e-5, rtol=0)


def test_fused_and_manual_attention_agree_and_attention_is_returned():
    torch.manual_seed(0)
    fused = create("bert-tiny").eval()
    manual = create("bert-tiny", fused_attn=False).eval()
    manual.load_state_dict(fused.state_dict())
    ids, segments, mask = _inputs()
    ids = ids % 128
    a = fused(ids, token_type_ids=segments, attention_mask=mask)
    b = manual(ids, token_type_ids=segments, attention_mask=mask, return_attn=True)
    torch.testing.assert_close(a.hidden, b.hidden, atol=1e-5, rtol=0)
    assert len(b.attentions) == 2 and b.attentions[0].shape == (3, 2, 12, 12)
    assert torch.all(b.attentions[0][2, :, :, 5:] == 0)  # padded keys get no weight


def test_language_ids_need_language_embeddings():
    model = create("bert-tiny")
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="num_languages"):
        model(ids, language_ids=torch.zeros_like(ids))
    xlm = create("bert-tiny", num_languages=2)
    with_lang = xlm(ids, language_ids=torch.ones_like(ids)).hidden
    assert not torch.allclose(with_lang, xlm(ids, language_ids=torch.zeros_like(ids)).hidden)


def test_a_tiny_bert_learns_masked_tokens():
    """MLM on a repeated pattern: the loss falls far below the uniform-guess loss."""
    torch.manual_seed(0)
    model = create("bert-tiny-pretraining")
    ids = (torch.arange(16) % 8 + 7).expand(32, 16)  # tokens 7..14 repeating
    g = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        inputs, labels = mask_tokens(
            ids, vocab_size=128, mask_id=6, special_ids=range(7), prob=0.3, generator=g
        )
        mlm_logits, _ = model(inputs)
        loss = F.cross_entropy(mlm_logits.flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5  # log(121) = 4.8 for a uniform guess


def test_classifier_reuses_a_pretrained_encoder():
    pre = create("bert-tiny-pretraining")
    clf = create("bert-tiny-classifier", num_labels=3)
    clf.bert.load_state_dict(pre.bert.state_dict())
    assert isinstance(clf, BertForSequenceClassification) and isinstance(pre, BertForPreTraining)
    assert clf(torch.ones(2, 5, dtype=torch.long)).shape == (2, 3)


def test_bad_config_is_explained():
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        create("bert-tiny")(torch.ones(1, 65, dtype=torch.long))  # 64 positions


# ------------------------------------------------------------------------------------------
# Masking
# ------------------------------------------------------------------------------------------

SPECIAL = {0, 1, 2, 3}  # e.g. [PAD], [CLS], [SEP], [MASK]
MASK_ID, VOCAB = 3, 50


def _masked(prob=0.15, shape=(400, 500), seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(VOCAB, shape, generator=g)
    inputs, labels = mask_tokens(
        ids, vocab_size=VOCAB, mask_id=MASK_ID, special_ids=SPECIAL, prob=prob, generator=g
    )
    return ids, inputs, labels


def test_masking_follows_the_15_percent_and_80_10_10_rule():
    ids, inputs, labels = _masked()
    special = torch.isin(ids, torch.tensor(sorted(SPECIAL)))
    chosen = labels != IGNORE_INDEX
    assert not (chosen & special).any(), "special tokens are never chosen"
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen]), "unchosen tokens stay as they are"
    assert abs(chosen[~special].float().mean().item() - 0.15) < 0.005
    n = chosen.sum().item()
    as_mask = (inputs[chosen] == MASK_ID).sum().item() / n
    unchanged = (inputs[chosen] == ids[chosen]).sum().item() / n
    replaced = inputs[chosen][(inputs[chosen] != MASK_ID) & (inputs[chosen] != ids[chosen])]
    assert abs(as_mask - 0.8) < 0.01
    # a random replacement equals the original 1/46 of the time, so "unchanged" is a bit over 10%
    assert abs(unchanged - (0.1 + 0.1 / (VOCAB - len(SPECIAL)))) < 0.01
    assert abs(len(replaced) / n - 0.1 * (1 - 1 / (VOCAB - len(SPECIAL)))) < 0.01
    assert not torch.isin(replaced, torch.tensor(sorted(SPECIAL))).any()


def test_masking_is_deterministic_and_leaves_the_input_alone():
    ids, a_inputs, a_labels = _masked(shape=(4, 30))
    before = ids.clone()
    _, b_inputs, b_labels = _masked(shape=(4, 30))
    assert torch.equal(a_inputs, b_inputs) and torch.equal(a_labels, b_labels)
    assert torch.equal(ids, before)
    _, _, labels = _masked(prob=0.0, shape=(4, 30))
    assert (labels == IGNORE_INDEX).all()


def test_masking_rejects_bad_input():
    with pytest.raises(TypeError, match="integer"):
        mask_tokens(torch.zeros(3), vocab_size=10, mask_id=3, special_ids=[0])
    with pytest.raises(ValueError, match="prob"):
        mask_tokens(torch.zeros(3).long(), vocab_size=10, mask_id=3, special_ids=[0], prob=1.5)
    with pytest.raises(ValueError, match="vocab_size"):
        mask_tokens(torch.tensor([12]), vocab_size=10, mask_id=3, special_ids=[0])

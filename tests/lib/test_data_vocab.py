"""Vocab and the padding collate functions of course_lib.data.vocab."""

import pytest
import torch
from torch.utils.data import DataLoader

from course_lib.data import (
    BERT_SPECIALS,
    Vocab,
    make_collate,
    make_seq2seq_collate,
    pad_collate,
    pad_sequences,
    seq2seq_collate,
)


def test_special_ids():
    v = Vocab(["x", "y"])
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v.itos[:4] == ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
    assert len(v) == 6
    b = Vocab(["x"], specials=BERT_SPECIALS)
    assert (b.pad_id, b.cls_id, b.sep_id, b.mask_id) == (0, 4, 5, 6)
    with pytest.raises(KeyError, match="BERT_SPECIALS"):
        _ = v.mask_id


def test_round_trip_and_unknown():
    tokens = list("the quick brown fox")
    v = Vocab.build([tokens])
    ids = v.encode(tokens, add_bos=True, add_eos=True)
    assert ids[0] == v.bos_id and ids[-1] == v.eos_id
    assert v.decode(ids) == tokens
    assert v.decode_str(torch.tensor(ids)) == "the quick brown fox"
    assert v.decode(ids, strip_special=False, stop_at_eos=False)[0] == "[BOS]"
    # decoding stops at the first EOS, the rest (a greedy decoder's garbage) is dropped
    assert v.decode([v.stoi["t"], v.eos_id, v.stoi["h"]]) == ["t"]
    assert v.encode("tz") == [v.stoi["t"], v.unk_id]
    assert v.decode(v.encode("tz")) == ["t", "[UNK]"]
    with pytest.raises(IndexError, match="out of range"):
        v.decode([len(v)])


def test_build_is_frequency_ordered_and_order_independent():
    a = Vocab.build([["b", "a", "a", "c"], ["c", "c"]])
    assert a.itos[4:] == ["c", "a", "b"]
    b = Vocab.build([["c", "c"], ["c", "a", "b", "a"]])
    assert a == b
    assert Vocab.build([["a", "a", "b"]], min_freq=2).itos[4:] == ["a"]
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build([["a"]], min_freq=0)


def test_save_load(tmp_path):
    v = Vocab(["é", "b", "[x]"], specials=BERT_SPECIALS)
    v.save(tmp_path / "vocab.json")
    w = Vocab.load(tmp_path / "vocab.json")
    assert w == v and w.mask_id == v.mask_id


def test_bad_specials():
    with pytest.raises(ValueError, match="PAD"):
        Vocab(["a"], specials=["[BOS]", "[PAD]"])
    with pytest.raises(TypeError, match="str"):
        Vocab([1, 2])


def test_pad_sequences():
    padded, lengths = pad_sequences([[5, 6, 7], [8], torch.tensor([9, 9])], pad_id=0)
    assert padded.dtype == torch.long and lengths.tolist() == [3, 1, 2]
    assert padded.tolist() == [[5, 6, 7], [8, 0, 0], [9, 9, 0]]
    padded, _ = pad_sequences([[1]], pad_id=-1, max_len=3)
    assert padded.tolist() == [[1, -1, -1]]
    with pytest.raises(ValueError, match="max_len"):
        pad_sequences([[1, 2]], max_len=1)
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([])


def test_pad_collate_structures():
    x, lengths = pad_collate([[1, 2], [3]])
    assert x.tolist() == [[1, 2], [3, 0]] and lengths.tolist() == [2, 1]
    (a, a_len), labels = pad_collate([([1, 2, 3], 0), ([4], 1)])
    assert a.tolist() == [[1, 2, 3], [4, 0, 0]] and a_len.tolist() == [3, 1]
    assert labels.tolist() == [0, 1]
    out = make_collate(pad_id=9)([{"ids": [1], "y": 1.5}, {"ids": [2, 3], "y": 2.5}])
    assert out["ids"].tolist() == [[1, 9], [2, 3]] and out["ids_lengths"].tolist() == [1, 2]
    assert torch.allclose(out["y"], torch.tensor([1.5, 2.5]))
    with pytest.raises(TypeError, match="cannot collate"):
        pad_collate(["abc"])


def test_seq2seq_collate_shifts_targets():
    batch = [([4, 5, 6], [1, 7, 8, 2]), ([4], [1, 9, 2])]
    out = seq2seq_collate(batch)
    assert out["src"].tolist() == [[4, 5, 6], [4, 0, 0]]
    assert out["src_lengths"].tolist() == [3, 1]
    assert out["tgt_in"].tolist() == [[1, 7, 8], [1, 9, 0]]
    assert out["tgt_out"].tolist() == [[7, 8, 2], [9, 2, 0]]
    assert out["tgt_lengths"].tolist() == [3, 2]
    loader = DataLoader(batch, batch_size=2, collate_fn=make_seq2seq_collate(0, 0))
    assert torch.equal(next(iter(loader))["tgt_out"], out["tgt_out"])
    with pytest.raises(ValueError, match="BOS"):
        seq2seq_collate([([1], [2])])

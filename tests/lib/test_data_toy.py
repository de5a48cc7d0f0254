"""Copy / reverse / sort toy tasks."""

from collections import Counter

import pytest
from torch.utils.data import DataLoader

from course_lib.data import TOY_TASKS, ToyDataset, generate_toy


@pytest.mark.parametrize("task", TOY_TASKS)
def test_targets_are_right(task):
    pairs = generate_toy(task, 200, seed=0, n_symbols=7, min_len=2, max_len=9)
    assert {len(s) for s, _ in pairs} == set(range(2, 10))
    for source, target in pairs:
        assert all(0 <= s < 7 for s in source)
        if task == "copy":
            assert target == source
        elif task == "reverse":
            assert target == [source[len(source) - 1 - i] for i in range(len(source))]
        else:
            assert Counter(target) == Counter(source)
            assert all(a <= b for a, b in zip(target, target[1:]))


def test_determinism():
    assert generate_toy("sort", 50, seed=1) == generate_toy("sort", 50, seed=1)
    assert generate_toy("sort", 50, seed=1) != generate_toy("sort", 50, seed=2)


def test_dataset_and_collate():
    ds = ToyDataset("reverse", 40, seed=3, n_symbols=12, max_len=6)
    v = ds.vocab
    assert len(v) == 4 + 12
    src, tgt = ds[0]
    assert tgt[0] == v.bos_id and tgt[-1] == v.eos_id and len(tgt) == len(src) + 2
    assert ds.decode(tgt) == ds.pairs[0][1] and ds.decode(src) == ds.pairs[0][0]
    batch = next(iter(DataLoader(ds, batch_size=8, collate_fn=ds.collate)))
    assert batch["src_lengths"].tolist() == [len(s) for s, _ in ds.pairs[:8]]
    assert (batch["tgt_lengths"] == batch["src_lengths"] + 1).all()
    for row, (_, target) in zip(batch["tgt_out"], ds.pairs):
        assert ds.decode(row) == target


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown toy task"):
        generate_toy("shuffle", 3, 0)
    with pytest.raises(ValueError, match="min_len"):
        generate_toy("copy", 3, 0, min_len=5, max_len=2)
    with pytest.raises(ValueError, match="n_symbols"):
        ToyDataset("copy", 3, 0, n_symbols=0)

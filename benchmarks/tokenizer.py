"""Encode speed of course_lib's byte-level BPE (pure Python) vs Hugging Face ``tokenizers`` (Rust).

Both learn a byte-level BPE with the same vocabulary size and the same special tokens on the
same generated corpus (course_lib.data: English stories, their pseudo-language translations and
human-readable dates; nothing is downloaded), then encode a held-out text of the same kind. The
table gives characters per second and the speed relative to Hugging Face's per-line ``encode``
measured in the same run (a report, not a target: course_lib's tokenizer is meant to be read).
course_lib caches the ids of every pre-token (word) it has seen; the generated corpus has a small
vocabulary, so the "no cache" row, which merges every word from its bytes, shows the cost of the
merge loop itself.

Run:  .venv/bin/python benchmarks/tokenizer.py   (under a minute)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from course_lib.data.corpus import generate_corpus, generate_parallel
from course_lib.data.dates import generate_dates
from course_lib.tokenizers import SPECIAL_TOKENS, BPETokenizer


def make_corpus(n: int, seed: int) -> list[str]:
    """``n`` English sentences, ``n`` pseudo-language sentences and ``n`` dates, interleaved."""
    english = generate_corpus(n, seed)
    pseudo = [target for _, target in generate_parallel(n, seed + 1)]
    dates = [source for source, _ in generate_dates(n, seed + 2)]
    return [line for triple in zip(english, pseudo, dates) for line in triple]


class _NoCache(dict):
    """Stands in for the tokenizer's pre-token cache so that every word is merged from bytes."""

    def get(self, key, default=None):
        return default

    def __setitem__(self, key, value) -> None:
        pass


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_hf(corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=20_000, help="per kind, for training")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    corpus = make_corpus(args.sentences, seed=0)
    held_out = make_corpus(args.sentences // 2, seed=100)
    n_chars = sum(len(line) for line in held_out)
    print(
        f"corpus: {len(corpus)} lines ({sum(map(len, corpus)) / 1e6:.2f} M characters); "
        f"held-out: {len(held_out)} lines ({n_chars / 1e6:.2f} M characters); "
        f"vocab_size={args.vocab_size}"
    )

    start = time.perf_counter()
    ours = BPETokenizer.train(corpus, vocab_size=args.vocab_size)
    ours_train = time.perf_counter() - start
    start = time.perf_counter()
    hf = train_hf(corpus, args.vocab_size)
    hf_train = time.perf_counter() - start

    ours_ids = [ours.encode(line) for line in held_out]
    hf_ids = [enc.ids for enc in hf.encode_batch(held_out)]
    assert all(ours.decode(ids) == line for ids, line in zip(ours_ids, held_out))
    assert all(hf.decode(ids) == line for ids, line in zip(hf_ids, held_out))

    def ours_cold() -> None:
        ours._cache.clear()  # what a first pass over new text costs
        for line in held_out:
            ours.encode(line)

    def ours_warm() -> None:
        for line in held_out:
            ours.encode(line)

    def ours_uncached() -> None:
        cache, ours._cache = ours._cache, _NoCache()
        try:
            ours_warm()
        finally:
            ours._cache = cache

    def hf_single() -> None:
        for line in held_out:
            hf.encode(line)

    def hf_batch() -> None:
        hf.encode_batch(held_out)

    timings = {
        "course_lib (cache cleared)": median_seconds(ours_cold, args.repeats),
        "course_lib (warm cache)": median_seconds(ours_warm, args.repeats),
        "course_lib (no cache)": median_seconds(ours_uncached, args.repeats),
        "HF tokenizers, encode per line": median_seconds(hf_single, args.repeats),
        "HF tokenizers, encode_batch": median_seconds(hf_batch, args.repeats),
    }
    baseline = timings["HF tokenizers, encode per line"]
    tokens = {"course_lib": sum(map(len, ours_ids)), "HF": sum(map(len, hf_ids))}

    print(f"\n{'':32s} {'vocab':>6s} {'train s':>8s} {'tokens/char':>12s}")
    print(f"{'course_lib BPETokenizer':32s} {ours.vocab_size:6d} {ours_train:8.2f} "
          f"{tokens['course_lib'] / n_chars:12.3f}")  # fmt: skip
    print(f"{'HF tokenizers BPE':32s} {hf.get_vocab_size():6d} {hf_train:8.2f} "
          f"{tokens['HF'] / n_chars:12.3f}")  # fmt: skip
    header = f"{'encode held-out text':32s} {'seconds':>8s} {'M chars/s':>10s}"
    print(f"\n{header} {'speed vs HF/line':>17s}")
    for name, seconds in timings.items():
        print(
            f"{name:32s} {seconds:8.3f} {n_chars / seconds / 1e6:10.2f} {baseline / seconds:16.3f}x"
        )
    for variant in ("warm cache", "no cache"):
        ratio = timings[f"course_lib ({variant})"] / baseline
        print(f"time course_lib ({variant}) / HF tokenizers (per line): {ratio:.2f}")


if __name__ == "__main__":
    main()

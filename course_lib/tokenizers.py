"""Byte-level byte-pair encoding (BPE), written out.

Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword Units",
Section 3.2 and Algorithm 1: start from single symbols, count adjacent symbol pairs over the
corpus, replace the most frequent pair by a new symbol, repeat. Here the starting symbols are the
256 byte values of the UTF-8 encoding (byte-level BPE, as in GPT-2, Radford et al. 2019), so any
string -- any script, emoji, newlines -- is encoded without an unknown token and decoded exactly.

Vocabulary layout (ids)::

    0 .. S-1           special tokens, [PAD] = 0 by default, never split and never merged
    S .. S+255         the 256 single bytes
    S+256 ..           merged tokens, in the order they were learned (a lower id merges first)

Text is first cut into pre-tokens (a word with its leading space, a number, a run of punctuation,
whitespace) so merges never cross word boundaries; ``"".join(pretokenize(s)) == s`` for every s.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]")

# Letters (any other word character included), digits, punctuation/symbols (emoji, "_"), each
# optionally with one leading space; whitespace keeps its last space for the next word.
_PRETOKEN_PATTERN = r" ?[^\W\d_]+| ?\d+| ?(?:[^\w\s]|_)+|\s+(?!\S)|\s+"
_PRETOKEN_RE = re.compile(_PRETOKEN_PATTERN)
_FORMAT = "course_lib.bpe"
_CACHE_SIZE = 100_000


def pretokenize(text: str) -> list[str]:
    """Cut ``text`` into the pieces BPE works inside; the pieces concatenate back to ``text``."""
    return _PRETOKEN_RE.findall(text)


def count_pairs(words: Sequence[Sequence[int]], counts: Sequence[int]) -> Counter:
    """How often each adjacent pair occurs, word ``words[i]`` weighted by ``counts[i]``."""
    pairs: Counter = Counter()
    for word, n in zip(words, counts, strict=True):
        for pair in zip(word, word[1:]):
            pairs[pair] += n
    return pairs


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` (left to right) by ``new_id``."""
    first, second = pair
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == first and ids[i + 1] == second:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def learn_merges(
    words: Sequence[Sequence[int]],
    counts: Sequence[int],
    *,
    num_merges: int,
    first_id: int,
    min_frequency: int = 2,
    progress: bool = False,
) -> list[tuple[int, int]]:
    """Learn up to ``num_merges`` merges; merge ``k`` creates id ``first_id + k``.

    Each step merges the most frequent pair; ties go to the smallest pair ``(first, second)``, so
    the result does not depend on dictionary order. Pair counts are updated incrementally: only the
    words containing the merged pair are re-counted (a heap with lazy deletion finds the maximum).
    Stops early when the best pair occurs fewer than ``min_frequency`` times.
    """
    words = [list(w) for w in words]
    pair_counts = count_pairs(words, counts)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[int, int]] = []
    bar = tqdm(total=num_merges, desc="learning BPE merges", disable=not progress)
    while len(merges) < num_merges and heap:
        negative_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative_count:
            continue  # stale heap entry: the count changed after it was pushed
        if -negative_count < min_frequency:
            break
        new_id = first_id + len(merges)
        merges.append(pair)
        touched: set[tuple[int, int]] = set()
        for i in where.pop(pair):
            word, n = words[i], counts[i]
            merged = merge_pair(word, pair, new_id)
            if len(merged) == len(word):
                continue  # an earlier merge already consumed this occurrence
            for old in zip(word, word[1:]):
                pair_counts[old] -= n
                touched.add(old)
            for new in zip(merged, merged[1:]):
                pair_counts[new] += n
                where[new].add(i)
                touched.add(new)
            words[i] = merged
        for p in touched:
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
            else:
                del pair_counts[p]
        bar.update(1)
    bar.close()
    return merges


class BPETokenizer:
    """A byte-level BPE tokenizer: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.

    Build one with ``BPETokenizer.train(corpus, vocab_size=...)`` or ``BPETokenizer.load(path)``.
    """

    def __init__(
        self,
        *,
        merges: Sequence[tuple[int, int]] = (),
        special_tokens: Sequence[str] = SPECIAL_TOKENS,
    ) -> None:
        specials = list(special_tokens)
        if len(set(specials)) != len(specials) or any(not s for s in specials):
            raise ValueError(f"special_tokens must be distinct non-empty strings, got {specials}")
        self.special_tokens = tuple(specials)
        self.special_ids = {s: i for i, s in enumerate(specials)}
        self.byte_offset = len(specials)
        # id -> the bytes it stands for (specials: their UTF-8 text, used only by decode)
        self._bytes = [s.encode("utf-8") for s in specials]
        self._bytes += [bytes([b]) for b in range(256)]
        self.merges: list[tuple[int, int]] = []
        self._merge_ids: dict[tuple[int, int], int] = {}
        for first, second in merges:
            pair = (int(first), int(second))
            for part in pair:
                if not self.byte_offset <= part < len(self._bytes):
                    raise ValueError(
                        f"merge {pair} refers to id {part}, which is not a byte or an earlier "
                        f"merge (valid: {self.byte_offset}..{len(self._bytes) - 1})"
                    )
            self._merge_ids[pair] = len(self._bytes)
            self._bytes.append(self._bytes[pair[0]] + self._bytes[pair[1]])
            self.merges.append(pair)
        by_length = sorted(specials, key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, by_length))) if specials else None
        self._cache: dict[str, list[int]] = {}

    # ----------------------------------------------------------------------------- training
    @classmethod
    def train(
        cls,
        corpus: str | Iterable[str],
        *,
        vocab_size: int,
        special_tokens: Sequence[str] = SPECIAL_TOKENS,
        min_frequency: int = 2,
        progress: bool = True,
    ) -> BPETokenizer:
        """Learn merges on ``corpus`` (a string or an iterable of strings).

        ``vocab_size`` counts special tokens, the 256 bytes and the merges; it is an upper bound
        (training stops early when no pair occurs ``min_frequency`` times). Occurrences of special
        tokens in the corpus are cut out, so no merge ever spans one.
        """
        base = len(special_tokens) + 256
        if vocab_size < base:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: it must hold {len(special_tokens)} special "
                f"tokens and 256 bytes, so at least {base}"
            )
        texts = [corpus] if isinstance(corpus, str) else corpus
        splitter = cls(special_tokens=special_tokens)
        word_counts: Counter = Counter()
        for text in texts:
            for piece, is_special in splitter._split_special(text, allowed=True):
                if not is_special:
                    word_counts.update(pretokenize(piece))
        words = [[base - 256 + b for b in w.encode("utf-8")] for w in word_counts]
        merges = learn_merges(
            words,
            list(word_counts.values()),
            num_merges=vocab_size - base,
            first_id=base,
            min_frequency=min_frequency,
            progress=progress,
        )
        return cls(merges=merges, special_tokens=special_tokens)

    # ----------------------------------------------------------------------------- encoding
    @property
    def vocab_size(self) -> int:
        """Number of ids: special tokens + 256 bytes + merges."""
        return len(self._bytes)

    @property
    def pad_id(self) -> int:
        """Id of ``[PAD]`` (raises if this tokenizer has no ``[PAD]``)."""
        return self.token_to_id("[PAD]")

    def token_to_id(self, token: str) -> int:
        """Id of a special token, e.g. ``token_to_id("[CLS]")``."""
        if token not in self.special_ids:
            raise KeyError(
                f"{token!r} is not a special token; special tokens: {self.special_tokens}"
            )
        return self.special_ids[token]

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for (a special token: its UTF-8 text)."""
        self._check_ids([token_id])
        return self._bytes[token_id]

    def _split_special(self, text: str, *, allowed: bool | Collection[str]):
        """Yield ``(piece, is_special)``; only allowed special tokens are cut out."""
        if not allowed or self._special_re is None:
            yield text, False
            return
        start = 0
        for match in self._special_re.finditer(text):
            token = match.group()
            if allowed is not True and token not in allowed:
                continue
            if match.start() > start:
                yield text[start : match.start()], False
            yield token, True
            start = match.end()
        if start < len(text):
            yield text[start:], False

    def _encode_pretoken(self, piece: str) -> list[int]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        ids = [self.byte_offset + b for b in piece.encode("utf-8")]
        merge_ids = self._merge_ids
        while len(ids) >= 2:
            # Apply the earliest-learned merge present, exactly the order used in training.
            pair = min(zip(ids, ids[1:]), key=lambda p: merge_ids.get(p, float("inf")))
            if pair not in merge_ids:
                break
            ids = merge_pair(ids, pair, merge_ids[pair])
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[piece] = ids
        return ids

    def encode(self, text: str, *, allowed_special: bool | Collection[str] = True) -> list[int]:
        """Token ids of ``text``; ``decode(encode(text)) == text`` for every string.

        ``allowed_special``: True (every special token in the text becomes its single id), False
        (special-token text is encoded as ordinary bytes), or a collection of the allowed ones.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        if allowed_special is not True and allowed_special is not False:
            unknown = set(allowed_special) - set(self.special_tokens)
            if unknown:
                raise ValueError(f"allowed_special has unknown tokens {sorted(unknown)}")
        ids: list[int] = []
        for piece, is_special in self._split_special(text, allowed=allowed_special):
            if is_special:
                ids.append(self.special_ids[piece])
            else:
                for word in pretokenize(piece):
                    ids.extend(self._encode_pretoken(word))
        return ids

    def encode_batch(self, texts: Iterable[str], **kwargs) -> list[list[int]]:
        """``[encode(t) for t in texts]``."""
        return [self.encode(t, **kwargs) for t in texts]

    def _check_ids(self, ids: Iterable[int]) -> None:
        for i in ids:
            if not 0 <= i < len(self._bytes):
                raise ValueError(f"token id {i} is out of range for vocab_size {len(self._bytes)}")

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        first_byte = self.byte_offset
        data = b"".join(self._bytes[i] for i in ids if not (skip_special and i < first_byte))
        return data.decode("utf-8", errors="replace")

    # ----------------------------------------------------------------------------- saving
    def to_dict(self) -> dict:
        """A JSON-ready description: special tokens and merges (pairs of ids)."""
        return {
            "format": _FORMAT,
            "version": 1,
            "pretokenizer": _PRETOKEN_PATTERN,
            "special_tokens": list(self.special_tokens),
            "merges": [list(pair) for pair in self.merges],
        }

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a tokenizer written by ``save``."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT:
            raise ValueError(f"{path} is not a course_lib BPE tokenizer (format {_FORMAT!r})")
        if data.get("pretokenizer") != _PRETOKEN_PATTERN:
            raise ValueError(f"{path} was saved with a different pre-tokenizer; retrain it")
        merges = [tuple(pair) for pair in data["merges"]]
        return cls(merges=merges, special_tokens=data["special_tokens"])

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"

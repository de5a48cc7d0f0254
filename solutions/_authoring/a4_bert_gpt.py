# ruff: noqa: E501 (the strings are notebook cells; build.py formats them in the notebook)
"""Source of assignment A4 (``solutions/a4_bert_gpt/a4_bert_gpt.ipynb``) and samples.

Run ``python solutions/_authoring/build.py a4_bert_gpt``, then ``make release``.
"""

from __future__ import annotations

from nbtools import Builder, unmark

NAME = "a4_bert_gpt"

COUNT_PAIRS = '''
def count_pairs(words: list[list[int]], counts: list[int]) -> dict[tuple[int, int], int]:
    """Occurrences of each adjacent pair of ids, word ``words[i]`` counting ``counts[i]`` times.

    words: one list of token ids per distinct pre-token; counts: how often each occurs.
    Returns ``{(first, second): total}`` for every pair that occurs at least once, e.g.
    ``count_pairs([[1, 2, 1, 2]], [3]) == {(1, 2): 6, (2, 1): 3}``.
    """
    ### BEGIN SOLUTION
    pairs: Counter = Counter()
    for word, n in zip(words, counts):
        for pair in zip(word, word[1:]):
            pairs[pair] += n
    return dict(pairs)
    ### END SOLUTION
'''

MERGE_PAIR = '''
def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """A new list: ``ids`` with every occurrence of ``pair`` (scanning left to right, no overlaps)
    replaced by ``new_id``."""
    ### BEGIN SOLUTION
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
    ### END SOLUTION
'''

LEARN_MERGES = '''
def learn_merges(text: str, num_merges: int) -> list[tuple[int, int]]:
    """Learn up to ``num_merges`` byte-level BPE merges on ``text``.

    Returns ``[(first, second), ...]``: merge ``k`` joins ids ``first`` and ``second`` into id
    ``256 + k``.
    """
    ### BEGIN SOLUTION
    word_counts = Counter(pretokenize(text))
    words = [list(word.encode("utf-8")) for word in word_counts]
    counts = list(word_counts.values())
    merges = []
    for k in range(num_merges):
        pairs = count_pairs(words, counts)
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))  # most frequent, then smallest
        if pairs[best] < 2:
            break
        words = [merge_pair(word, best, 256 + k) for word in words]
        merges.append(best)
    return merges
    ### END SOLUTION
'''

ENCODE = '''
def bpe_encode(text: str, merges: list[tuple[int, int]]) -> list[int]:
    """Token ids of ``text`` under ``merges`` (ids 0..255 are bytes, merge k is id 256 + k)."""
    ### BEGIN SOLUTION
    rank = {tuple(pair): k for k, pair in enumerate(merges)}
    ids = []
    for piece in pretokenize(text):
        word = list(piece.encode("utf-8"))
        while len(word) >= 2:
            # the pair that was learned first; merges learned later cannot come before it
            pair = min(zip(word, word[1:]), key=lambda p: rank.get(p, math.inf))
            if pair not in rank:
                break
            word = merge_pair(word, pair, 256 + rank[pair])
        ids.extend(word)
    return ids
    ### END SOLUTION
'''

DECODE = '''
def bpe_decode(ids: list[int], merges: list[tuple[int, int]]) -> str:
    """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
    ### BEGIN SOLUTION
    vocab = [bytes([i]) for i in range(256)]
    for first, second in merges:
        vocab.append(vocab[first] + vocab[second])
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    ### END SOLUTION
'''

MASK_TOKENS = '''
def mask_tokens(
    ids: Tensor,
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: list[int],
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's masked-LM corruption of integer ``ids`` of any shape, e.g. (B, T).

    Returns ``(inputs, labels)``, both shaped like ``ids`` (dtype long): the corrupted ids, and
    the original id at each chosen position (-100 elsewhere).
    """
    ### BEGIN SOLUTION
    special = torch.tensor(sorted(set(special_ids) | {mask_id}))
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    candidates = ordinary.nonzero().squeeze(1)  # the ids a random replacement may take
    chosen = (torch.rand(ids.shape, generator=generator) < prob) & ~torch.isin(ids, special)
    action = torch.rand(ids.shape, generator=generator)  # 80 / 10 / 10 split of the chosen
    random_ids = candidates[torch.randint(len(candidates), ids.shape, generator=generator)]
    inputs = ids.clone().long()
    inputs[chosen & (action < 0.8)] = mask_id
    to_random = chosen & (action >= 0.8) & (action < 0.9)
    inputs[to_random] = random_ids[to_random]
    labels = torch.where(chosen, ids.long(), torch.full_like(inputs, -100))
    return inputs, labels
    ### END SOLUTION
'''

SEGMENTS = '''
def segment_ids(input_ids: Tensor, *, sep_id: int, pad_id: int) -> Tensor:
    """Segment (token type) ids (B, T) long for ``input_ids`` (B, T) = [CLS] a [SEP] b [SEP] [PAD] ...:
    0 up to and including the first [SEP], 1 after it, 0 at padding."""
    ### BEGIN SOLUTION
    is_sep = (input_ids == sep_id).long()
    seps_before = is_sep.cumsum(dim=1) - is_sep  # [SEP]s strictly before each token
    segment = (seps_before >= 1).long()
    return segment.masked_fill(input_ids == pad_id, 0)
    ### END SOLUTION
'''

EMBEDDINGS = '''
class BertEmbeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm and dropout: ids (B, T) -> (B, T, C)."""

    def __init__(
        self,
        *,
        vocab_size: int,
        hidden_size: int,
        max_position_embeddings: int,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """input_ids (B, T), token_type_ids (B, T) or None (segment 0) -> embeddings (B, T, C)."""
        ### BEGIN SOLUTION
        B, T = input_ids.shape
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"a sequence of {T} tokens is longer than max_position_embeddings="
                f"{self.position_embeddings.num_embeddings}"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(T, device=input_ids.device)  # (T,), broadcast over B
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T, C)
        return self.dropout(self.norm(x))
        ### END SOLUTION
'''

ATTENTION = '''
class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention with a key/value cache (GPT-2 names ``c_attn``, ``c_proj``)."""

    def __init__(self, *, n_embd: int, n_head: int):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # W_Q, W_K, W_V side by side
        self.c_proj = nn.Linear(n_embd, n_embd)  # W_O

    def forward(self, x: Tensor, past_kv: tuple[Tensor, Tensor] | None = None):
        """x (B, T, C): the T new tokens; past_kv: None or (k, v), each (B, H, S, D), of S earlier tokens.

        Returns ``(y, (k, v))``: y (B, T, C) and the keys and values of all S + T tokens, each
        (B, H, S + T, D). New token i sits at position S + i and attends to positions 0 .. S + i.
        """
        ### BEGIN SOLUTION
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)  # (B, H, S + T, D)
            v = torch.cat([past_kv[1], v], dim=2)
        S = k.shape[2]
        keep = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # (B, H, T, S)
        scores = scores.masked_fill(~keep, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): heads side by side again
        return self.c_proj(y), (k, v)
        ### END SOLUTION
'''

GPT = '''
class GPT(nn.Module):
    """Decoder-only language model: ids (B, T) -> next-token logits (B, T, V) and the cache."""

    def __init__(self, *, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList(Block(n_embd=n_embd, n_head=n_head) for _ in range(n_layer)),
                ln_f=nn.LayerNorm(n_embd),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx: Tensor, past_kv: list | None = None):
        """idx (B, T): new token ids; past_kv: None or the list of n_layer (k, v) of the last call.

        Returns ``(logits, present_kv)``: logits (B, T, V) and a list of n_layer (k, v), each
        (B, H, S + T, D).
        """
        ### BEGIN SOLUTION
        B, T = idx.shape
        S = 0 if past_kv is None else past_kv[0][0].shape[2]
        if S + T > self.block_size:
            raise ValueError(f"{S + T} tokens do not fit in block_size={self.block_size}")
        positions = torch.arange(S, S + T, device=idx.device)  # (T,)
        x = self.transformer.wte(idx) + self.transformer.wpe(positions)  # (B, T, C)
        present_kv = []
        for layer, block in enumerate(self.transformer.h):
            x, kv = block(x, None if past_kv is None else past_kv[layer])
            present_kv.append(kv)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        return logits, present_kv
        ### END SOLUTION
'''

TOP_K = '''
def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of the last dimension, set the rest to -inf (ties at the
    k-th value are kept; k >= V keeps everything)."""
    ### BEGIN SOLUTION
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))
    ### END SOLUTION
'''

TOP_P = '''
def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter over the last dimension: keep the smallest set of most probable tokens
    whose probabilities sum to at least ``p``, set the rest to -inf."""
    ### BEGIN SOLUTION
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above
    drop_sorted = mass_before >= p  # p was reached without this token
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))
    ### END SOLUTION
'''

SAMPLE = '''
def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One id per row of ``logits`` (B, V), sampled after temperature, top-k and top-p: (B, 1)."""
    ### BEGIN SOLUTION
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
    ### END SOLUTION
'''

GENERATE = '''
@torch.no_grad()
def generate(
    model: GPT,
    idx: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Extend the prompts ``idx`` (B, T) by ``max_new_tokens`` tokens: (B, T + max_new_tokens)."""
    ### BEGIN SOLUTION
    if idx.shape[1] + max_new_tokens > model.block_size:
        raise ValueError(
            f"{idx.shape[1]} + {max_new_tokens} tokens do not fit in block_size={model.block_size}"
        )
    was_training = model.training
    model.eval()
    logits, past_kv = model(idx)  # the prompt, once
    for step in range(max_new_tokens):
        last = logits[:, -1, :]  # (B, V)
        if greedy:
            next_id = last.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            next_id = sample_next_token(
                last, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
            )
        idx = torch.cat([idx, next_id], dim=1)
        if step + 1 < max_new_tokens:
            logits, past_kv = model(next_id, past_kv)  # only the new token goes through
    model.train(was_training)
    return idx
    ### END SOLUTION
'''


def build() -> Builder:
    nb = Builder()
    nb.md(
        r"""
        # A4: BERT and GPT

        The two families of pre-trained Transformers differ in one mask. BERT (Devlin et al. 2019)
        lets every token see every other token and learns by filling in hidden words; GPT (Radford
        et al. 2019) lets a token see only the tokens before it and learns to predict the next
        one. In this assignment you build the pieces of both, from the tokenizer to text
        generation, and train a tiny GPT on a generated corpus.

        **Learning goals.** After this assignment you can
        1. learn byte-pair-encoding merges on a corpus and encode and decode any string exactly;
        2. corrupt a batch for BERT's masked-language-model objective (15 %, then 80 / 10 / 10)
           and build its segment and position embeddings;
        3. write GPT's causal self-attention and check that a token never sees its future;
        4. keep a key/value cache whose logits equal a full recomputation;
        5. sample the next token with temperature, top-k and top-p (nucleus) filtering;
        6. explain the autoregressive factorisation and why BERT cannot generate left to right.
        """,
        gid="intro",
    )
    nb.md(
        r"""
        ## What is graded

        | step | graded by | points |
        |---|---|---|
        | 1. `count_pairs`, `merge_pair` | hidden tests | 2 |
        | 1. `learn_merges` | hidden tests | 4 |
        | 1. `bpe_encode`, `bpe_decode` | hidden tests | 4 |
        | 2. `mask_tokens` (graded on 15 % and 80 / 10 / 10 over large samples) | hidden tests | 6 |
        | 2. `segment_ids`, `BertEmbeddings` | hidden tests | 5 |
        | 3. `CausalSelfAttention`, `GPT.forward` | hidden tests | 7 |
        | 3. the key/value cache | hidden tests | 4 |
        | 4. `top_k_filter`, `top_p_filter` | hidden tests | 4 |
        | 4. `sample_next_token` (graded on its distributions) | hidden tests | 4 |
        | 4. `generate` | hidden tests | 2 |
        | Q1 the autoregressive factorisation | by hand | 3 |
        | Q2 why BERT cannot generate left to right | by hand | 3 |
        | **total** | | **48** (42 automatic + 6 by hand) |

        **How the automatic grading works.** Each step has a *visible check* below it, whose
        message says what is wrong. The grade comes from *hidden tests* run by the instructor
        on your notebook with other random sizes and inputs: they compare your code with a
        reference given the same weights, and check properties such as causality. Random
        functions (masking, sampling) are graded on their *distributions*, over tens of thousands
        of draws from a seed the grader fixes, never on a single draw. Only your imports,
        functions, classes and constants are graded; experiment cells are not run by the grader.

        **Rules.** Keep the signatures and the attribute names of the given `__init__` methods
        (the tests load weights by name). Write the algorithms yourself: **the grader fails a
        test whose code calls** `torch.nn.functional.scaled_dot_product_attention`,
        `nn.MultiheadAttention` or PyTorch's Transformer modules, or `course_lib`'s reference
        implementations (`course_lib.tokenizers`' `learn_merges`, `merge_pair`, `count_pairs`
        and `BPETokenizer`, `course_lib.masking`, `course_lib.models`, `course_lib.attention`,
        `course_lib.layers`), directly or through an alias. The helpers imported below
        (`pretokenize`, the corpus, the training loop) are fine, and so are `nn.Linear`,
        `nn.Embedding`, `nn.LayerNorm`, `torch.softmax`, `torch.topk` and `torch.multinomial`.
        """,
        gid="grading",
    )
    nb.provided(
        """
        import math
        from collections import Counter

        import torch
        import torch.nn.functional as F
        from torch import Tensor, nn

        from course_lib.data.corpus import corpus_vocab, generate_corpus
        from course_lib.tokenizers import pretokenize

        torch.set_num_threads(1)  # small tensors: one thread is as fast and timings are steadier
        """,
        gid="setup",
    )

    # ------------------------------------------------------------------------------------ BPE
    nb.md(
        r"""
        ## 1. Byte-pair encoding (10 points)

        A language model reads integers, so text must first become a sequence of token ids.
        Whole words leave no room for a word the vocabulary has never seen; single characters
        make sequences long. Byte-pair encoding (BPE; Sennrich, Haddow and Birch 2016,
        Algorithm 1) finds a middle ground from the data: start from single symbols, count every
        pair of adjacent symbols in the corpus, give the most frequent pair a new id, replace it
        everywhere, and repeat.

        GPT-2 runs BPE on **bytes**: the starting symbols are the 256 byte values of the UTF-8
        encoding, ids `0..255`, so every string (any script, emoji, line breaks) is encoded
        without an "unknown" token and decoded back exactly. Merge number `k` (counting from 0)
        creates id `256 + k`.

        Merges never cross word boundaries: the text is first cut into *pre-tokens* by
        `pretokenize` (given): a word with its leading space, a number, a run of punctuation, or
        whitespace. The pieces concatenate back to the text.
        """,
        gid="bpe_md",
    )
    nb.scratch(
        """
        print(pretokenize("the cat sees 2 dogs.\\nthe  fox sleeps!"))
        print(list("é🦊".encode()))  # one character can be several bytes
        """
    )
    nb.md(
        r"""
        BPE counts pairs over the *distinct* pre-tokens, each weighted by how often it occurs: a
        corpus in which `" the"` appears 1,000 times contributes each pair of `" the"` 1,000
        times but is scanned once.

        **Task 1.1.** `count_pairs(words, counts)`: how often each adjacent pair of ids occurs
        (overlapping pairs count: `[2, 2, 2]` holds the pair `(2, 2)` twice).
        """,
        gid="count_pairs_md",
    )
    nb.solution(COUNT_PAIRS, gid="count_pairs")
    nb.check(
        """
        from course_lib.checks.a4 import check_count_pairs

        check_count_pairs(count_pairs)
        """,
        gid="check_count_pairs",
        points=1,
    )
    nb.md(
        r"""
        **Task 1.2.** `merge_pair(ids, pair, new_id)`: replace every occurrence of `pair`,
        scanning left to right; occurrences do not overlap, so `[5, 5, 5]` with the pair `(5, 5)`
        becomes `[new_id, 5]`.
        """,
        gid="merge_pair_md",
    )
    nb.solution(MERGE_PAIR, gid="merge_pair")
    nb.check(
        """
        from course_lib.checks.a4 import check_merge_pair

        check_merge_pair(merge_pair)
        """,
        gid="check_merge_pair",
        points=1,
    )
    nb.md(
        r"""
        **Task 1.3.** `learn_merges(text, num_merges)`: the training loop. So that everyone's
        tokenizer is the same, follow these rules exactly:

        - pre-tokenize `text` with `pretokenize`, count how often each distinct pre-token occurs,
          and turn each into the list of its UTF-8 bytes (ids `0..255`);
        - at each step take the most frequent pair; **ties go to the smallest pair** (compare the
          tuples, so `(32, 116)` beats `(97, 98)` at equal counts);
        - **stop early** when the most frequent pair occurs fewer than 2 times (or no pair is
          left);
        - merge `k` creates id `256 + k`; return the list of merged pairs in the order learned.
        """,
        gid="learn_merges_md",
    )
    nb.solution(LEARN_MERGES, gid="learn_merges")
    nb.check(
        """
        from course_lib.checks.a4 import check_learn_merges

        check_learn_merges(learn_merges)
        corpus = generate_corpus(2000, seed=0)
        merges = learn_merges("\\n".join(corpus), num_merges=150)
        print(len(merges), "merges; the first ten:", merges[:10])
        """,
        gid="check_learn_merges",
        points=4,
    )
    nb.md(
        r"""
        **Task 1.4.** `bpe_encode(text, merges)`: pre-tokenize, turn each pre-token into bytes,
        then apply the merges **in the order they were learned** (merge 0 first). Repeatedly
        merging the pair with the lowest merge number present gives the same result, often
        faster. Then `bpe_decode(ids, merges)`: the bytes of all ids joined, decoded as UTF-8
        with `errors="replace"` (ids that cut a character in half decode to `"\ufffd"` instead
        of raising).
        """,
        gid="encode_md",
    )
    nb.solution(ENCODE, gid="bpe_encode")
    nb.check(
        """
        from course_lib.checks.a4 import check_bpe_encode

        check_bpe_encode(bpe_encode)
        sentence = "the little fox sleeps in the barn ."
        ids = bpe_encode(sentence, merges)
        print(len(sentence.encode()), "bytes ->", len(ids), "tokens:", ids)
        """,
        gid="check_bpe_encode",
        points=2,
    )
    nb.solution(DECODE, gid="bpe_decode")
    nb.check(
        """
        from course_lib.checks.a4 import check_bpe_decode

        check_bpe_decode(bpe_decode)
        print([bpe_decode([i], merges) for i in ids])
        """,
        gid="check_bpe_decode",
        points=2,
    )

    # ----------------------------------------------------------------------------------- BERT
    nb.md(
        r"""
        ## 2. BERT's inputs (11 points)

        BERT is pre-trained as a *masked language model* (Devlin et al. 2019, Section 3.1): a
        random 15 % of the ordinary tokens are chosen, and the model must predict the original
        token at each chosen position from the context on **both** sides. If every chosen token
        became `[MASK]`, the model would never see a real token at a position it has to predict,
        and at fine-tuning time there is no `[MASK]` at all. So a chosen token is replaced by
        `[MASK]` 80 % of the time, by a random token 10 % of the time, and left unchanged 10 % of
        the time.

        **Task 2.1.** `mask_tokens`. Rules:

        - each token that is not special is chosen independently with probability `prob`;
          special tokens (`special_ids`, and `mask_id` itself) are **never** chosen; they can sit
          anywhere in the vocabulary;
        - a chosen token becomes `mask_id` with probability 0.8, a random ordinary token with
          probability 0.1 (drawn uniformly from the ids in `[0, vocab_size)` that are not
          special; by chance it may equal the original), and stays as it is with probability 0.1;
        - `labels` holds the original id at chosen positions and `-100` everywhere else (the
          `ignore_index` of `F.cross_entropy`);
        - draw every random number from `generator` (`torch.rand(..., generator=generator)`), so
          that a seeded generator gives the same result twice; do not modify `ids`.

        The hidden tests call your function on tens of thousands of tokens and compare the
        frequencies with 15 % and 80 / 10 / 10.
        """,
        gid="mask_md",
    )
    nb.solution(MASK_TOKENS, gid="mask_tokens")
    nb.check(
        """
        from course_lib.checks.a4 import check_mask_tokens

        check_mask_tokens(mask_tokens)
        vocab = corpus_vocab(bert=True)
        sentence = "[CLS] a little fox sleeps in the barn . [SEP]".split()
        ids = torch.tensor(vocab.encode(sentence))
        inputs, labels = mask_tokens(
            ids.repeat(4, 1), vocab_size=len(vocab), mask_id=vocab.stoi["[MASK]"],
            special_ids=[vocab.stoi[s] for s in vocab.specials], prob=0.3,
            generator=torch.Generator().manual_seed(0),
        )
        for row in inputs:
            print(" ".join(vocab.decode(row.tolist(), strip_special=False)))
        """,
        gid="check_mask_tokens",
        points=6,
    )
    nb.md(
        r"""
        For next-sentence prediction BERT reads two segments at once,
        `[CLS] a ... [SEP] b ... [SEP]`, padded with `[PAD]` to the length of the batch. The
        model needs to know which segment a token belongs to: a *segment embedding* (A or B) is
        added to each token, next to the position embedding.

        **Task 2.2.** `segment_ids(input_ids, sep_id=..., pad_id=...)`: 0 for every token up to
        and including the first `[SEP]`, 1 for the tokens after it up to and including the second
        `[SEP]`, and 0 for padding. A row with a single `[SEP]` is all segment 0. No loop over
        tokens needed: `torch.cumsum` counts the `[SEP]`s seen so far.
        """,
        gid="segments_md",
    )
    nb.solution(SEGMENTS, gid="segment_ids")
    nb.check(
        """
        from course_lib.checks.a4 import check_segment_ids

        check_segment_ids(segment_ids)
        pair = "[CLS] a cat sleeps . [SEP] it is happy . [SEP] [PAD] [PAD]".split()
        example = torch.tensor([vocab.encode(pair)])
        print(segment_ids(example, sep_id=vocab.stoi["[SEP]"], pad_id=vocab.pad_id))
        """,
        gid="check_segment_ids",
        points=2,
    )
    nb.md(
        r"""
        **Task 2.3.** BERT's input representation (Figure 2 of the paper) is the sum of the
        token, position and segment embeddings, followed by LayerNorm and dropout. Positions are
        `0 .. T-1` (learned embeddings, not sinusoids). Missing `token_type_ids` mean segment 0
        everywhere. A sequence longer than `max_position_embeddings` must raise a `ValueError`
        that says so.
        """,
        gid="embeddings_md",
    )
    nb.solution(EMBEDDINGS, gid="bert_embeddings")
    nb.check(
        """
        from course_lib.checks.a4 import check_bert_embeddings

        check_bert_embeddings(BertEmbeddings)
        """,
        gid="check_bert_embeddings",
        points=3,
    )

    # ------------------------------------------------------------------------------------ GPT
    nb.md(
        r"""
        ## 3. GPT (11 points)

        A language model assigns a probability to a whole sequence by the chain rule,
        $p(x_1, \dots, x_T) = \prod_{t=1}^{T} p(x_t \mid x_1, \dots, x_{t-1})$. GPT computes all
        $T$ factors in one forward pass: position $t$ predicts token $t+1$, and a causal mask
        stops position $t$ from attending to any later position, so its prediction cannot peek
        at the answer.

        The model follows GPT-2 (names as in its checkpoints): token and position embeddings,
        pre-norm blocks `x + attn(ln_1(x))` then `x + mlp(ln_2(x))`, a final LayerNorm `ln_f`,
        and an output layer `lm_head` that shares its weight with the token embedding.

        **The key/value cache.** When generating, each new token would otherwise recompute the
        keys and values of all earlier tokens, which never change (the causal mask keeps them
        from seeing the new token). So every attention layer returns its keys and values, and
        the next call passes them back as `past_kv` together with only the new tokens. A new
        token at absolute position `S + i` (after `S` cached tokens) may attend to positions
        `0 .. S + i`.

        **Task 3.1.** `CausalSelfAttention.forward`: project with `c_attn` (queries, keys and
        values side by side, in that order), split into `H` heads of `D = C / H`, append the new
        keys and values to `past_kv`, attend with the causal mask and the $1/\sqrt{D}$ scaling,
        merge the heads and project with `c_proj`.
        """,
        gid="gpt_md",
    )
    nb.solution(ATTENTION, gid="causal_self_attention")
    nb.check(
        """
        from course_lib.checks.a4 import check_causal_self_attention

        check_causal_self_attention(CausalSelfAttention)
        """,
        gid="check_causal_self_attention",
        points=3,
    )
    nb.md(
        r"""
        The rest of a block is given: the MLP (GELU, tanh approximation as in GPT-2) and the two
        residual lines. Each block passes its layer's `past_kv` to its attention and hands back
        the extended keys and values.
        """,
        gid="blocks_md",
    )
    nb.provided(
        '''
        class MLP(nn.Module):
            """Position-wise feed-forward network C -> 4C -> C."""

            def __init__(self, *, n_embd: int):
                super().__init__()
                self.c_fc = nn.Linear(n_embd, 4 * n_embd)
                self.c_proj = nn.Linear(4 * n_embd, n_embd)

            def forward(self, x: Tensor) -> Tensor:
                return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


        class Block(nn.Module):
            """Pre-norm decoder block: x (B, T, C), past_kv -> x (B, T, C), (k, v)."""

            def __init__(self, *, n_embd: int, n_head: int):
                super().__init__()
                self.ln_1 = nn.LayerNorm(n_embd)
                self.attn = CausalSelfAttention(n_embd=n_embd, n_head=n_head)
                self.ln_2 = nn.LayerNorm(n_embd)
                self.mlp = MLP(n_embd=n_embd)

            def forward(self, x: Tensor, past_kv=None):
                a, kv = self.attn(self.ln_1(x), past_kv)
                x = x + a
                x = x + self.mlp(self.ln_2(x))
                return x, kv
        ''',
        gid="gpt_blocks",
    )
    nb.md(
        r"""
        **Task 3.2.** `GPT.forward(idx, past_kv)`: `past_kv` is `None` or the list returned by
        the previous call (one `(k, v)` per block). With `S` cached tokens the new tokens sit at
        positions `S .. S + T - 1`. A total length above `block_size` must raise a `ValueError`.
        """,
        gid="gpt_forward_md",
    )
    nb.solution(GPT, gid="gpt")
    nb.check(
        """
        from course_lib.checks.a4 import check_gpt_forward

        check_gpt_forward(GPT)
        model = GPT(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)
        idx = torch.randint(50, (1, 10))
        logits, _ = model(idx)
        changed = idx.clone()
        changed[0, 6:] = torch.randint(50, (4,))  # change the future of position 5
        print("past logits unchanged:", torch.allclose(model(changed)[0][0, :6], logits[0, :6]))
        """,
        gid="check_gpt_forward",
        points=4,
    )
    nb.md(
        r"""
        The cache is right when feeding a sequence piece by piece gives the same logits as
        feeding it whole: one token at a time, and in chunks of several tokens, where the causal
        mask inside a chunk must start at position `S` (this check needs no new code).
        """,
        gid="cache_md",
    )
    nb.check(
        """
        from course_lib.checks.a4 import check_kv_cache

        check_kv_cache(GPT)
        """,
        gid="check_kv_cache",
        points=4,
    )

    # ------------------------------------------------------------------------------- sampling
    nb.md(
        r"""
        ## 4. Sampling (10 points)

        The model gives a distribution over the next token; how we pick from it changes the
        text. Taking the arg-max (greedy decoding) is repetitive; sampling from the full
        distribution wanders into the long tail of unlikely tokens. Three knobs, applied in this
        order to the logits $z$ of the last position:

        1. **temperature** $\tau$: sample from $\mathrm{softmax}(z / \tau)$; $\tau < 1$ sharpens,
           $\tau > 1$ flattens;
        2. **top-k**: keep the $k$ largest logits, set the others to $-\infty$;
        3. **top-p** (nucleus sampling, Holtzman et al. 2020): sort the tokens by probability and
           keep the smallest set of the most probable ones whose probabilities sum to at least
           $p$ (so the token that crosses $p$ is kept); set the others to $-\infty$. The most
           probable token is always kept.

        **Task 4.1.** The two filters. Both work on the last dimension of logits of any shape
        `(..., V)` and return a new tensor.
        """,
        gid="sampling_md",
    )
    nb.solution(TOP_K, gid="top_k_filter")
    nb.check(
        """
        from course_lib.checks.a4 import check_top_k_filter

        check_top_k_filter(top_k_filter)
        """,
        gid="check_top_k_filter",
        points=2,
    )
    nb.solution(TOP_P, gid="top_p_filter")
    nb.check(
        """
        from course_lib.checks.a4 import check_top_p_filter

        check_top_p_filter(top_p_filter)
        """,
        gid="check_top_p_filter",
        points=2,
    )
    nb.md(
        r"""
        **Task 4.2.** `sample_next_token(logits, ...)`: logits `(B, V)` of the last position ->
        one sampled id per row, `(B, 1)`. Divide by the temperature, then apply top-k, then
        top-p, then sample from the softmax (`torch.multinomial`) with `generator`.
        """,
        gid="sample_md",
    )
    nb.solution(SAMPLE, gid="sample_next_token")
    nb.check(
        """
        from course_lib.checks.a4 import check_sample_next_token

        check_sample_next_token(sample_next_token)
        """,
        gid="check_sample_next_token",
        points=4,
    )
    nb.md(
        r"""
        **Task 4.3.** `generate`: run the prompt through the model once, then at each step pick
        a token from the last position's logits (sampled, or the arg-max when `greedy=True`) and
        feed **only that token** with the cache. The total length may not exceed
        `model.block_size` (raise a `ValueError`).
        """,
        gid="generate_md",
    )
    nb.solution(GENERATE, gid="generate")
    nb.check(
        """
        from course_lib.checks.a4 import check_generate

        check_generate(generate, GPT)
        """,
        gid="check_generate",
        points=2,
    )
    nb.md(
        r"""
        ### Putting it together (not graded)

        A tiny GPT trained for a few seconds on the generated corpus, with your tokenizer, your
        model and your sampler. The loss falls from about 6 ($\ln V$) to below 2; the samples
        start to look like the corpus' sentences ("a little fox sleeps in the barn ."). Try
        other temperatures and values of `top_p`.
        """,
        gid="demo_md",
    )
    nb.provided(
        """
        from torch.utils.data import DataLoader

        from course_lib.data.corpus import TokenBlockDataset
        from course_lib.train import fit

        text = "\\n".join(corpus)
        token_ids = bpe_encode(text, merges)
        print(f"{len(text.encode())} bytes -> {len(token_ids)} tokens")
        blocks = TokenBlockDataset(token_ids, block_size=32)
        loader = DataLoader(blocks, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
        lm = GPT(vocab_size=256 + len(merges), block_size=64, n_layer=2, n_head=4, n_embd=64)


        def lm_loss(model, batch):
            x, y = batch  # (B, T) each
            logits, _ = model(x)  # (B, T, V)
            return F.cross_entropy(logits.flatten(0, 1), y.flatten())


        history = fit(lm, loader, loss_fn=lm_loss, epochs=100, max_steps=300, lr=3e-3, seed=0, device="cpu")
        print(f"loss: {history.losses[0]:.2f} -> {sum(history.losses[-20:]) / 20:.2f}")
        """,
        gid="train_gpt",
    )
    nb.scratch(
        """
        prompt = torch.tensor([bpe_encode("the", merges)])
        for top_p in (0.5, 0.9, 1.0):
            out = generate(lm, prompt, 40, top_p=top_p, generator=torch.Generator().manual_seed(1))
            print(f"top_p={top_p}:", bpe_decode(out[0].tolist(), merges).split("\\n")[0])
        """
    )

    # -------------------------------------------------------------------------------- written
    nb.md(
        r"""
        ## 5. Written answers (6 points, graded by hand)

        Answer in a few sentences each, in your own words.
        """,
        gid="written_md",
    )
    nb.written(
        r"""
        **Q1 (3 points).** Write the autoregressive factorisation of $p(x_1, \dots, x_T)$.
        Explain how one forward pass of GPT over a training sequence gives all $T$ factors at
        once, and what would go wrong in training without the causal mask. What does the
        key/value cache save at generation time, and why is it exact?
        """,
        r"""
        $p(x_1, \dots, x_T) = \prod_t p(x_t \mid x_{<t})$: the chain rule, exact for any
        distribution. GPT reads the whole sequence and the output at position $t$ is trained
        (cross-entropy) to predict $x_{t+1}$; the causal mask makes position $t$ depend only on
        $x_{\le t}$, so each output is a valid conditional and all $T$ terms of the
        log-likelihood are computed in parallel (teacher forcing). Without the mask position
        $t$ could attend to $x_{t+1}$ and copy it: the training loss would fall towards zero
        while the model learns nothing it can use, since at generation time the future is not
        there. The cache stores the keys and values of earlier tokens; because of the mask they
        do not depend on later tokens, so they are exactly the numbers a full recomputation
        would produce. Each step then costs one token's projections and one row of attention
        instead of reprocessing the whole prefix.
        """,
        gid="q1_factorisation",
        points=3,
    )
    nb.written(
        r"""
        **Q2 (3 points).** Why can BERT not generate text left to right the way GPT does? Name
        what in its training and in its attention prevents it, and one thing you could do
        instead with a masked language model.
        """,
        r"""
        BERT is trained to predict a masked token from context on both sides; its attention has
        no causal mask, so every output depends on the tokens to its right. It never learns
        $p(x_t \mid x_{<t})$: at generation time the right context does not exist (a run of
        [MASK]s is far from its training inputs, where only 15 % of the tokens are corrupted),
        and appending a token changes the representations of all earlier tokens, so nothing can
        be cached and the outputs define no left-to-right factorisation of a joint
        distribution. Instead one can fill in blanks, rescore candidate sentences (pseudo
        log-likelihood), generate iteratively by masking and re-predicting (mask-predict), or
        put a decoder on top (an encoder-decoder model).
        """,
        gid="q2_bert",
        points=3,
    )
    return nb


# --------------------------------------------------------------------------------------------
# Sample submissions
# --------------------------------------------------------------------------------------------


def _edit(code: str, old: str, new: str) -> str:
    """The solution ``code`` without its markers, with ``old`` replaced by ``new`` (once)."""
    if code.count(old) != 1:
        raise ValueError(f"expected exactly one {old[:40]!r} in the solution")
    return unmark(code.replace(old, new))


PARTIAL = {
    # three classic mistakes: every chosen token becomes [MASK] (no 80/10/10), the nucleus drops
    # the token that crosses p, and the causal mask is skipped whenever a cache is passed (right
    # for one new token at a time, wrong for a chunk of new tokens)
    "mask_tokens": """
def mask_tokens(ids, *, vocab_size, mask_id, special_ids, prob=0.15, generator=None):
    special = torch.tensor(sorted(set(special_ids) | {mask_id}))
    chosen = (torch.rand(ids.shape, generator=generator) < prob) & ~torch.isin(ids, special)
    inputs = ids.clone().long().masked_fill(chosen, mask_id)
    labels = torch.where(chosen, ids.long(), torch.full_like(inputs, -100))
    return inputs, labels
""",
    "top_p_filter": """
def top_p_filter(logits, p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    drop_sorted = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1) > p
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
""",
    "causal_self_attention": _edit(
        ATTENTION,
        "S = k.shape[2]\n"
        "        keep = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # (B, H, T, S)\n"
        '        scores = scores.masked_fill(~keep, float("-inf"))',
        "scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # (B, H, T, S)\n"
        "        if past_kv is None:  # (wrong: several new tokens after a cache need a mask too)\n"
        "            keep = torch.ones(T, T, dtype=torch.bool).tril()\n"
        '            scores = scores.masked_fill(~keep, float("-inf"))',
    ),
}

BROKEN = {
    # a syntax error, a crash, a wrong return type and a killed worker: the grader replaces the
    # dead worker and grades everything else
    "segment_ids": """
def segment_ids(input_ids, *, sep_id, pad_id)
    return (input_ids == sep_id).cumsum(1)
""",
    "bert_embeddings": _edit(
        EMBEDDINGS,
        "positions = torch.arange(T, device=input_ids.device)  # (T,), broadcast over B",
        "positions = torch.arange(T)[:, None]  # (T, 1): does not broadcast over (B, T)",
    ),
    "mask_tokens": """
def mask_tokens(ids, *, vocab_size, mask_id, special_ids, prob=0.15, generator=None):
    chosen = torch.rand(ids.shape, generator=generator) < prob
    return ids.masked_fill(chosen, mask_id)  # forgot the labels
""",
    "generate": """
def generate(model, idx, max_new_tokens, **kwargs):
    import os

    os._exit(0)  # kills the worker
""",
}

CHEAT = {
    # the fused kernel through an alias (found by the static scan: every test that forbids it
    # fails), and course_lib's BPE learner reached by strings (missed by the scan, caught at run
    # time in the tests that call learn_merges)
    "causal_self_attention": """
from torch.nn import functional as nnf

fast_attention = nnf.scaled_dot_product_attention


class CausalSelfAttention(nn.Module):
    def __init__(self, *, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, past_kv=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        if past_kv is not None:
            k, v = torch.cat([past_kv[0], k], 2), torch.cat([past_kv[1], v], 2)
        mask = torch.ones(T, k.shape[2], dtype=torch.bool).tril(k.shape[2] - T)
        y = fast_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)
""",
    "learn_merges": """
import importlib


def learn_merges(text, num_merges):
    library = importlib.import_module("course_lib." + "tokenizers")
    learner = getattr(library, "learn_" + "merges")
    words = Counter(library.pretokenize(text))
    ids = [list(w.encode("utf-8")) for w in words]
    return learner(ids, list(words.values()), num_merges=num_merges, first_id=256)
""",
}

SAMPLES = {"partial": PARTIAL, "broken": BROKEN, "cheat": CHEAT}
UNPARSABLE = ("broken",)  # a syntax error on purpose

# Scores of the samples (out of 42 automatic points):
# partial: loses the 80/10/10 and the uniform-replacement tests of mask_tokens (3), both top-p
# tests (2) and the two sampling tests that use top-p (2), the attention-with-cache test (1) and
# the chunked-cache test (2): 42 - 10 = 32.
# broken: loses segment_ids (2, syntax error), BertEmbeddings (3, crash), mask_tokens (6, wrong
# return type) and generate (2, killed worker): 42 - 13 = 29.
# cheat: loses every test that forbids the fused kernel (attention 3, GPT 4, cache 4, generate
# 2) and the three learn_merges tests (4): 42 - 17 = 25.
EXPECTED = {"partial": {"points": 32}, "broken": {"points": 29}, "cheat": {"points": 25}}

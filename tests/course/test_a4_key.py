"""A4's answer key (``autograder/suites/a4_bert_gpt/a4_key.py``) against independent oracles.

- ``bpe_encode`` / ``bpe_decode`` equal the book's ``BPETokenizer`` on mixed text;
- ``wordpiece_encode`` equals Hugging Face ``tokenizers``' WordPiece (whitespace split);
- ``whole_word_mask`` follows its rules, measured on large samples (whole words, rate ``prob``,
  80 / 10 / 10 per token, special ids never chosen);
- ``segment_ids`` equals a loop over tokens;
- ``GroupedCausalSelfAttention`` equals ``F.scaled_dot_product_attention(enable_gqa=True)``, and
  the book's ``CausalSelfAttention`` at G = H; fed in pieces with its cache it equals one call;
- ``min_p_filter``, ``repetition_penalty`` and the distribution ``sample_next_token`` draws from
  equal Hugging Face's ``MinPLogitsWarper``, ``RepetitionPenaltyLogitsProcessor`` and
  ``TemperatureLogitsWarper`` (Monte Carlo for the draws);
- ``generate`` with the cache equals a full recomputation, and the book's ``GPT.generate`` when
  nothing is penalised;
- (the recorded answers of the visible checks: test_recorded_answers.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from keys import load

key = load("a4_bert_gpt", "a4_key")
ALPHABET = list("abcdeéü日🦊0123 .,!\n\t")


def text_of(g: torch.Generator, n: int) -> str:
    return "".join(ALPHABET[i] for i in torch.randint(len(ALPHABET), (n,), generator=g).tolist())


@pytest.mark.parametrize("seed", range(3))
def test_bpe_equals_the_books_tokenizer(seed):
    from collections import Counter

    from course_lib.tokenizers import BPETokenizer, learn_merges, pretokenize

    g = torch.Generator().manual_seed(seed)
    train = text_of(g, 3000)
    counts = Counter(pretokenize(train))
    merges = learn_merges(
        [list(w.encode()) for w in counts], list(counts.values()), num_merges=60, first_id=256
    )
    book = BPETokenizer(merges=merges, special_tokens=())
    text = text_of(g, 400)
    ids = key.bpe_encode(text, merges)
    assert ids == book.encode(text)
    assert key.bpe_decode(ids, merges) == text
    cut = [*ids, *list("🦊".encode())[:2]]
    assert key.bpe_decode(cut, merges) == book.decode(cut)


def random_vocab(g: torch.Generator) -> dict[str, int]:
    letters = "abcd"
    pieces = {"[UNK]"}
    for _ in range(30):
        n = int(torch.randint(1, 4, (1,), generator=g))
        piece = "".join(letters[i] for i in torch.randint(4, (n,), generator=g).tolist())
        pieces.add(piece if torch.rand((), generator=g) < 0.4 else "##" + piece)
    return {p: i for i, p in enumerate(sorted(pieces))}


@pytest.mark.parametrize("seed", range(5))
def test_wordpiece_equals_hugging_face(seed):
    tokenizers = pytest.importorskip("tokenizers")
    g = torch.Generator().manual_seed(seed)
    vocab = random_vocab(g)
    hf = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    words = [
        "".join("abcde"[i] for i in torch.randint(5, (int(n),), generator=g).tolist())
        for n in torch.randint(1, 9, (60,), generator=g)
    ]
    text = "  ".join(words[:30]) + "\n" + "\t".join(words[30:])
    assert key.wordpiece_encode(text, vocab) == hf.encode(text).ids


def test_whole_word_mask_follows_its_rules():
    g = torch.Generator().manual_seed(0)
    V, mask_id, special = 12, 5, [0, 9, 11]
    B, T = 6000, 20
    ordinary = torch.tensor([i for i in range(V) if i not in special and i != mask_id])
    ids = ordinary[torch.randint(len(ordinary), (B, T), generator=g)]
    ids[:, 0], ids[:, -1], ids[:, 8] = 9, 11, 11
    ids[:, 4] = mask_id
    is_subword = torch.rand(B, T, generator=g) < 0.5
    is_subword[:, [0, 1, 4, 5, 8, 9, T - 1]] = False
    inputs, labels = key.whole_word_mask(
        ids, is_subword, vocab_size=V, mask_id=mask_id, special_ids=special, prob=0.3, generator=g
    )
    chosen = labels != -100
    is_special = torch.isin(ids, torch.tensor([*special, mask_id]))
    assert not (chosen & is_special).any() and torch.equal(inputs[is_special], ids[is_special])
    assert torch.equal(labels[chosen], ids[chosen]) and not ((inputs != ids) & ~chosen).any()
    for b in range(50):  # whole words, by a loop over tokens
        word_chosen = None
        for t in range(T):
            if is_special[b, t]:
                word_chosen = None
            elif not is_subword[b, t]:
                word_chosen = bool(chosen[b, t])
            else:
                assert bool(chosen[b, t]) == word_chosen
    starts = ~is_subword & ~is_special
    n = int(starts.sum())
    assert abs(int((chosen & starts).sum()) / n - 0.3) < 5 * (0.21 / n) ** 0.5
    c = int(chosen.sum())
    assert abs(int((inputs[chosen] == mask_id).sum()) / c - 0.8) < 5 * (0.16 / c) ** 0.5
    K = len(ordinary)
    kept = int((inputs[chosen] == ids[chosen]).sum()) / c
    assert abs(kept - (0.1 + 0.1 / K)) < 5 * (0.1 / c) ** 0.5
    replaced = chosen & (inputs != ids) & (inputs != mask_id)
    assert not torch.isin(inputs[replaced], torch.tensor([*special, mask_id])).any()


def test_segment_ids_equal_a_loop():
    g = torch.Generator().manual_seed(0)
    SEP, PAD = 3, 0
    ids = torch.randint(4, 20, (20, 12), generator=g)
    for b in range(20):
        n = int(torch.randint(4, 13, (1,), generator=g))
        ids[b, int(torch.randint(1, n - 1, (1,), generator=g))] = SEP
        if b % 3:
            ids[b, n - 1] = SEP
        ids[b, n:] = PAD
    want = torch.zeros_like(ids)
    for b in range(20):
        seen = 0
        for t in range(12):
            want[b, t] = 1 if seen >= 1 and ids[b, t] != PAD else 0
            seen += int(ids[b, t] == SEP)
    assert torch.equal(key.segment_ids(ids, sep_id=SEP, pad_id=PAD), want)


def gqa(H: int, G: int, D: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    module = key.GroupedCausalSelfAttention(n_embd=H * D, n_head=H, n_kv_head=G).double().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.5)
    return module


@pytest.mark.parametrize(("H", "G"), [(4, 2), (6, 3), (4, 1), (3, 3)])
def test_gqa_equals_torch_sdpa_with_enable_gqa(H, G):
    module = gqa(H, G)
    x = torch.randn(2, 7, H * 3, dtype=torch.float64)
    B, T, C = x.shape
    q = module.q_proj(x).view(B, T, H, 3).transpose(1, 2)
    k = module.k_proj(x).view(B, T, G, 3).transpose(1, 2)
    v = module.v_proj(x).view(B, T, G, 3).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    want = module.o_proj(y.transpose(1, 2).reshape(B, T, C))
    got, (gk, gv) = module(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gk, k)
    torch.testing.assert_close(gv, v)


def test_gqa_with_every_head_equals_the_books_causal_self_attention():
    from course_lib.models.gpt import CausalSelfAttention, GPTConfig

    module = gqa(4, 4)
    book = CausalSelfAttention(GPTConfig(n_embd=12, n_head=4, fused_attn=False)).double().eval()
    with torch.no_grad():
        book.c_attn.weight.copy_(
            torch.cat([module.q_proj.weight, module.k_proj.weight, module.v_proj.weight])
        )
        book.c_attn.bias.copy_(
            torch.cat([module.q_proj.bias, module.k_proj.bias, module.v_proj.bias])
        )
        book.c_proj.load_state_dict(module.o_proj.state_dict())
    x = torch.randn(3, 6, 12, dtype=torch.float64)
    torch.testing.assert_close(module(x)[0], book(x))


@pytest.mark.parametrize("cuts", [[1, 2, 3, 4, 5, 6, 7], [3, 5], [1, 6]])
def test_gqa_cache_equals_a_full_recomputation(cuts):
    module = gqa(6, 2)
    x = torch.randn(2, 8, 18, dtype=torch.float64)
    want, (k, v) = module(x)
    past, ys = None, []
    for start, end in zip([0, *cuts], [*cuts, 8]):
        y, past = module(x[:, start:end], past)
        ys.append(y)
    torch.testing.assert_close(torch.cat(ys, dim=1), want)
    torch.testing.assert_close(past[0], k)
    assert past[0].shape == (2, 2, 8, 3)


@pytest.fixture(scope="module")
def hf_processors():
    lp = pytest.importorskip("transformers.generation.logits_process")
    return lp


@pytest.mark.parametrize("seed", range(3))
def test_min_p_and_the_penalty_equal_hugging_face(hf_processors, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, 15, generator=g, dtype=torch.float64) * 2
    prev = torch.randint(15, (4, 6), generator=g)
    for min_p in (0.05, 0.2, 0.6):
        want = hf_processors.MinPLogitsWarper(min_p)(prev, logits.clone())
        torch.testing.assert_close(key.min_p_filter(logits, min_p), want)
    for penalty in (1.3, 2.5):
        want = hf_processors.RepetitionPenaltyLogitsProcessor(penalty)(prev, logits.clone())
        torch.testing.assert_close(key.repetition_penalty(logits, prev, penalty), want)


def test_sample_next_token_draws_from_hugging_faces_chain(hf_processors):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 12, generator=g, dtype=torch.float64) * 1.5
    prev = torch.tensor([[int(logits.argmax()), int(logits.argmin()), 4]])
    z = hf_processors.RepetitionPenaltyLogitsProcessor(2.0)(prev, logits.clone())
    z = hf_processors.TemperatureLogitsWarper(1.3)(prev, z)
    z = hf_processors.MinPLogitsWarper(0.1)(prev, z)
    probs = torch.softmax(z, dim=-1)[0]
    n = 200_000
    ids = key.sample_next_token(
        logits.expand(n, -1),
        prev.expand(n, -1),
        temperature=1.3,
        penalty=2.0,
        min_p=0.1,
        generator=g,
    )
    freq = torch.bincount(ids.flatten(), minlength=12).double() / n
    assert ((probs == 0) <= (freq == 0)).all()
    assert ((freq - probs).abs() <= 5 * (probs * (1 - probs) / n).sqrt() + 3 / n).all()


def book_gpt(seed: int):
    from course_lib.models import create

    torch.manual_seed(seed)
    model = (
        create(
            "gpt-tiny",
            vocab_size=15,
            block_size=14,
            n_layer=2,
            n_head=2,
            n_embd=8,
            fused_attn=False,
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.8)
    return model


@pytest.mark.parametrize("seed", range(3))
def test_generate_equals_a_full_recomputation(hf_processors, seed):
    model = book_gpt(seed)
    prompt = torch.randint(15, (3, 4), generator=torch.Generator().manual_seed(seed))
    got = key.generate(model, prompt, 10, greedy=True, penalty=2.0)
    out = prompt
    with torch.no_grad():
        for _ in range(10):
            z = hf_processors.RepetitionPenaltyLogitsProcessor(2.0)(out, model(out)[:, -1])
            out = torch.cat([out, z.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, out)
    assert torch.equal(
        key.generate(model, prompt, 10, greedy=True), model.generate(prompt, 10, greedy=True)
    )
    with pytest.raises(ValueError):
        key.generate(model, prompt, 11, greedy=True)

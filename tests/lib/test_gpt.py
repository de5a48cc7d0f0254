"""GPT: KV cache = full recomputation, causality, sampling filters, HF GPT-2 oracle, sizes."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import causal_mask
from course_lib.models import create
from course_lib.models.gpt import (
    GPT,
    GPTConfig,
    KVCache,
    from_hf_gpt2,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return create("gpt-tiny", vocab_size=50, n_embd=32, n_head=4, n_layer=2).eval()


def ids(B: int, T: int, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randint(vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def test_causal_mask_with_offset():
    assert torch.equal(causal_mask(4), torch.ones(4, 4).tril().bool())
    # 2 new queries after 3 cached tokens: positions 3 and 4 see keys 0..3 and 0..4
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, T_k=5), expected)


@pytest.mark.parametrize("fused", [True, False])
def test_kv_cache_logits_equal_full_recomputation(model, fused):
    m = create("gpt-tiny", vocab_size=50, n_embd=32, n_head=4, n_layer=2, fused_attn=fused).eval()
    m.load_state_dict(model.state_dict())
    x = ids(3, 20)
    with torch.no_grad():
        full = m(x)  # (B, T, V)
        cache = KVCache(m.config, batch_size=3, max_len=20)
        chunks = [m(x[:, :5], cache=cache), m(x[:, 5:9], cache=cache)]  # prompt, then a chunk
        chunks += [m(x[:, t : t + 1], cache=cache) for t in range(9, 20)]  # one token at a time
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=0)


def test_fused_and_manual_attention_agree(model):
    manual = GPT(config=GPTConfig(**{**model.config.__dict__, "fused_attn": False})).eval()
    manual.load_state_dict(model.state_dict())
    x = ids(2, 16)
    torch.testing.assert_close(manual(x), model(x), atol=1e-5, rtol=0)


def test_future_tokens_do_not_change_past_logits(model):
    x = ids(2, 12)
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1) % 50
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :7], b[:, :7], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_weights_are_tied(model):
    assert model.lm_head.weight is model.transformer.wte.weight


def test_cached_and_uncached_generation_agree(model):
    prompt = ids(2, 4)
    greedy = model.generate(prompt, 20, greedy=True)
    assert greedy.shape == (2, 24) and torch.equal(greedy[:, :4], prompt)
    assert torch.equal(greedy, model.generate(prompt, 20, greedy=True, use_cache=False))
    sampled = [
        model.generate(
            prompt,
            20,
            top_k=10,
            top_p=0.9,
            temperature=0.8,
            use_cache=use_cache,
            generator=torch.Generator().manual_seed(1),
        )  # fmt: skip
        for use_cache in (True, False)
    ]
    assert torch.equal(sampled[0], sampled[1])


def test_generation_length_checks(model):
    with pytest.raises(ValueError, match="block_size"):
        model.generate(ids(1, 60), 10, greedy=True)  # 70 > block_size 64 with the cache
    out = model.generate(ids(1, 60), 10, greedy=True, use_cache=False)  # crops the context
    assert out.shape == (1, 70)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(ids(1, 3), 2, temperature=0.0)


def test_top_k_filter_keeps_exactly_the_k_largest():
    logits = torch.tensor([[0.1, 2.0, -1.0, 3.0, 0.5], [5.0, 4.0, 3.0, 2.0, 1.0]])
    out = top_k_filter(logits, 2)
    assert torch.equal(torch.isfinite(out), torch.tensor([[0, 1, 0, 1, 0], [1, 1, 0, 0, 0]]).bool())
    assert torch.equal(out[torch.isfinite(out)], logits[torch.isfinite(out)])  # kept ones unchanged
    assert torch.equal(top_k_filter(logits, 99), logits)
    with pytest.raises(ValueError):
        top_k_filter(logits, 0)


def test_top_p_filter_keeps_the_smallest_nucleus():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5, 0.3, 0.15, 0.05
    logits = probs.log()
    kept = {p: torch.isfinite(top_p_filter(logits, p)).tolist() for p in (0.4, 0.75, 0.85, 1.0)}
    assert kept[0.4] == [False, True, False, False]  # the top token alone reaches 0.4
    assert kept[0.75] == [False, True, False, True]  # 0.5 + 0.3
    assert kept[0.85] == [True, True, False, True]  # 0.5 + 0.3 + 0.15
    assert kept[1.0] == [True, True, True, True]
    with pytest.raises(ValueError):
        top_p_filter(logits, 0.0)


def test_sampling_follows_the_filtered_distribution():
    probs = torch.tensor([0.1, 0.4, 0.2, 0.3])
    logits = probs.log().expand(20000, 4)
    g = torch.Generator().manual_seed(0)
    draws = sample_next_token(logits, top_k=2, generator=g).squeeze(1)
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]), atol=0.015, rtol=0)
    draws = sample_next_token(logits, temperature=0.5, generator=g).squeeze(1)
    sharpened = probs**2 / (probs**2).sum()  # softmax(log p / 0.5) = p^2 / sum p^2
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, sharpened, atol=0.015, rtol=0)
    assert torch.equal(sample_next_token(logits[:3], greedy=True), torch.ones(3, 1).long())


def test_from_hf_gpt2_matches_logits_hidden_states_and_greedy_generation():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, initializer_range=0.1,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    ours = from_hf_gpt2(hf).eval()
    assert ours.config.activation == "gelu_tanh"
    x = ids(2, 24, vocab=100)
    with torch.no_grad():
        out = hf(x, output_hidden_states=True)
        torch.testing.assert_close(ours(x), out.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours.hidden_states(x), out.hidden_states[-1], atol=1e-5, rtol=0)
        expected = hf.generate(
            x[:, :4], max_new_tokens=30, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    assert torch.equal(ours.generate(x[:, :4], 30, greedy=True), expected)
    # the base GPT2Model converts too (the head is the tied embedding)
    base = from_hf_gpt2(hf.transformer).eval()
    torch.testing.assert_close(base(x), out.logits, atol=1e-5, rtol=0)


def test_bad_config_is_explained():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(n_embd=30, n_head=4)

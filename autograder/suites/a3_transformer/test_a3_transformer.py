"""Hidden tests of A3 (the Transformer), 16 points.

CANARY-HIDDEN-A3-95ae27f0: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test); reference weights
are drawn here (LayerNorm gains and biases included, so that they matter) and loaded into the
student's modules by name; references are ``torch.nn.LayerNorm`` and ``course_lib``'s Transformer
(post-norm, ReLU, untied embeddings). The given ``course_lib.attention.MultiHeadAttention`` and
``sinusoidal_positional_encoding`` may be used; ``course_lib``'s model and layers, PyTorch's
Transformer modules and (in LayerNorm) its fused layer norm may not.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.checks import check_close
from course_lib.checks.core import check_not_constant
from course_lib.layers import FeedForward
from course_lib.models.transformer import DecoderBlock, EncoderBlock, Transformer, TransformerConfig

pytestmark = pytest.mark.forbid("course_lib.models", "course_lib.layers", "transformer_modules")
CANARY = "CANARY-HIDDEN-A3-95ae27f0"
PAD, BOS, EOS = 0, 1, 2


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def perturb_norms(module: nn.Module, rng: torch.Generator) -> None:
    """Random LayerNorm gains and biases (they start at 1 and 0, which would hide mistakes)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn(
                    p.shape, generator=rng))  # fmt: skip


def padding(rng: torch.Generator, B: int, S: int) -> torch.Tensor:
    """Keep-mask (B, S): random lengths, the first row complete and the second shorter."""
    lengths = torch.randint(1, S + 1, (B,), generator=rng)
    lengths[0], lengths[1] = S, draw(rng, 1, S - 1)
    return torch.arange(S)[None, :] < lengths[:, None]


def block_sizes(rng):
    H = draw(rng, 1, 3)  # d_model >= 4: at 2, LayerNorm collapses to +-gamma + beta
    return dict(d_model=H * draw(rng, 4 if H == 1 else 2, 4), num_heads=H, d_ff=draw(rng, 4, 16))


def reference_block(cls, sizes, rng):
    block = cls(**sizes, dropout=0.0, activation="relu", norm_first=False, fused=False).eval()
    perturb_norms(block, rng)
    return block


# --------------------------------------------------------------------------------------------
# LayerNorm (2), feed-forward (1)
# --------------------------------------------------------------------------------------------


def layer_norm_pair(student, rng):
    C = draw(rng, 4, 12)
    eps = 0.1  # large enough that eps outside the square root (or no eps) is always visible
    ref = nn.LayerNorm(C, eps=eps)
    perturb_norms(nn.ModuleDict({"norm": ref}), rng)
    mine = student.LayerNorm(C, eps=eps)
    mine.load_state_dict(ref.state_dict())
    shape = [draw(rng, 1, 3) for _ in range(draw(rng, 0, 2))] + [draw(rng, 1, 5), C]
    x = torch.randn(*shape, generator=rng) * draw(rng, 1, 5) + draw(rng, -3, 3)
    return ref, mine, x


@pytest.mark.points(1, cell="check_layer_norm")
@pytest.mark.forbid("layer_norm")
def test_layer_norm_values(student, rng):
    ref, mine, x = layer_norm_pair(student, rng)
    with torch.no_grad():
        check_close(mine(x), ref(x), name="LayerNorm(x)", atol=1e-5)


@pytest.mark.points(1, cell="check_layer_norm")
@pytest.mark.forbid("layer_norm")
def test_layer_norm_gradients(student, rng):
    ref, mine, x = layer_norm_pair(student, rng)
    dy = torch.randn(x.shape, generator=rng)
    got = mine.backward(x, grad_output=dy)
    leaf = x.clone().requires_grad_(True)
    ref(leaf).backward(dy)
    check_close(got.inputs[0], leaf.grad, name="the gradient with respect to x", atol=1e-4)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


@pytest.mark.points(1, cell="check_feed_forward")
def test_feed_forward(student, rng):
    C, hidden = draw(rng, 2, 10), draw(rng, 2, 16)
    ref = FeedForward(C, hidden, activation="relu")
    mine = student.FeedForward(C, hidden)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(draw(rng, 1, 3), draw(rng, 1, 5), C, generator=rng)
    with torch.no_grad():
        check_close(mine(x), ref(x), name="FeedForward(x)")


# --------------------------------------------------------------------------------------------
# Encoder block (3), decoder block (3)
# --------------------------------------------------------------------------------------------


def encoder_pair(student, rng):
    sizes = block_sizes(rng)
    ref = reference_block(EncoderBlock, sizes, rng)
    mine = student.EncoderBlock(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, S = draw(rng, 2, 4), draw(rng, 2, 7)
    x = torch.randn(B, S, sizes["d_model"], generator=rng)
    return ref, mine, x


@pytest.mark.points(1, cell="check_encoder_block")
def test_encoder_block(student, rng):
    ref, mine, x = encoder_pair(student, rng)
    out = mine(x)
    assert isinstance(out, tuple) and len(out) == 2, "EncoderBlock returns (x, weights)"
    with torch.no_grad():
        want, want_w = ref(x, return_attn=True)
    check_close(out[0], want, name="EncoderBlock(x)", atol=1e-5)
    check_close(out[1], want_w, name="the attention-weight tensor", atol=1e-5)


@pytest.mark.points(1, cell="check_encoder_block")
def test_encoder_block_padding(student, rng):
    ref, mine, x = encoder_pair(student, rng)
    keep = padding(rng, *x.shape[:2])[:, None, None, :]
    y, w = mine(x, keep)
    with torch.no_grad():
        want, want_w = ref(x, keep, return_attn=True)
    check_close(y, want, name="EncoderBlock(x, padding mask)", atol=1e-5)
    check_close(w, want_w, name="the attention-weight tensor with a padding mask", atol=1e-5)


@pytest.mark.points(1, cell="check_encoder_block")
def test_encoder_block_gradients(student, rng):
    ref, mine, x = encoder_pair(student, rng)
    dy = torch.randn(x.shape, generator=rng)
    got = mine.backward(x, grad_output=dy)
    ref(x).backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


def decoder_pair(student, rng):
    sizes = block_sizes(rng)
    ref = reference_block(DecoderBlock, sizes, rng)
    mine = student.DecoderBlock(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, T, S = draw(rng, 2, 4), draw(rng, 2, 6), draw(rng, 2, 7)
    y = torch.randn(B, T, sizes["d_model"], generator=rng)
    memory = torch.randn(B, S, sizes["d_model"], generator=rng)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keep = padding(rng, B, S)[:, None, None, :]
    return ref, mine, (y, memory, causal, keep)


@pytest.mark.points(1, cell="check_decoder_block")
def test_decoder_block(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    out = mine(*args)
    assert isinstance(out, tuple) and len(out) == 2, "DecoderBlock returns (y, (w_self, w_cross))"
    with torch.no_grad():
        want, _ = ref(*args, return_attn=True)
    check_close(out[0], want, name="DecoderBlock(y, memory, masks)", atol=1e-5)


@pytest.mark.points(1, cell="check_decoder_block")
def test_decoder_block_weights(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    _, weights = mine(*args)
    assert isinstance(weights, tuple) and len(weights) == 2, "the weights are (w_self, w_cross)"
    with torch.no_grad():
        _, (want_self, want_cross) = ref(*args, return_attn=True)
    check_close(weights[0], want_self, name="the self-attention weight tensor", atol=1e-5)
    check_close(weights[1], want_cross, name="the cross-attention weight tensor", atol=1e-5)


@pytest.mark.points(1, cell="check_decoder_block")
def test_decoder_block_is_causal(student, rng):
    _, mine, (y, memory, causal, keep) = decoder_pair(student, rng)
    t = draw(rng, 1, y.shape[1] - 1)
    changed = y.clone()
    changed[:, t:] = torch.randn(changed[:, t:].shape, generator=rng) * 3
    first, _ = mine(y, memory, causal, keep)
    second, _ = mine(changed, memory, causal, keep)
    check_close(second[:, :t], first[:, :t], name=f"the output tensor before position {t} "
                "when later target positions change", atol=1e-5)  # fmt: skip


# --------------------------------------------------------------------------------------------
# The whole model (4) and greedy decoding (3)
# --------------------------------------------------------------------------------------------


def model_pair(student, rng, dtype=torch.float32):
    H = draw(rng, 1, 2)
    sizes = dict(src_vocab_size=draw(rng, 8, 16), tgt_vocab_size=draw(rng, 6, 12),
                 d_model=2 * H * draw(rng, 2, 3), num_heads=H, num_layers=draw(rng, 1, 2),
                 d_ff=draw(rng, 4, 16))  # fmt: skip
    config = TransformerConfig(
        src_vocab_size=sizes["src_vocab_size"], tgt_vocab_size=sizes["tgt_vocab_size"],
        d_model=sizes["d_model"], num_heads=H, num_encoder_layers=sizes["num_layers"],
        num_decoder_layers=sizes["num_layers"], d_ff=sizes["d_ff"], dropout=0.0,
        activation="relu", norm_first=False, tie_embeddings=False, share_embeddings=False,
        fused_attn=False,
    )  # fmt: skip
    ref = Transformer(config=config).eval()
    perturb_norms(ref, rng)
    mine = student.Transformer(**sizes)
    mine.load_state_dict(ref.state_dict())
    if dtype == torch.float64:
        ref, mine = ref.double(), mine.double()
    return ref, mine.eval(), sizes


def seq_batch(rng, sizes):
    B, S, T = draw(rng, 2, 4), draw(rng, 2, 7), draw(rng, 2, 5)
    src = torch.randint(3, sizes["src_vocab_size"], (B, S), generator=rng)
    src = src.masked_fill(~padding(rng, B, S), PAD)
    tgt_in = torch.randint(3, sizes["tgt_vocab_size"], (B, T), generator=rng)
    tgt_in[:, 0] = BOS
    return src, tgt_in


@pytest.mark.points(1, cell="check_transformer")
def test_transformer_logits(student, rng):
    ref, mine, sizes = model_pair(student, rng)
    src, tgt_in = seq_batch(rng, sizes)
    out = mine(src, tgt_in)
    assert isinstance(out, tuple) and len(out) == 2, "Transformer returns (logits, weights)"
    with torch.no_grad():
        check_close(out[0], ref(src, tgt_in), name="the logits tensor", atol=1e-4)


@pytest.mark.points(1, cell="check_transformer")
def test_transformer_weights(student, rng):
    ref, mine, sizes = model_pair(student, rng)
    src, tgt_in = seq_batch(rng, sizes)
    _, weights = mine(src, tgt_in)
    with torch.no_grad():
        _, want = ref(src, tgt_in, return_attn=True)
    assert isinstance(weights, dict) and set(weights) >= set(want), (
        f"the weights should be a dict with the keys {sorted(want)}"
    )
    for name, expected in want.items():
        check_close(weights[name], expected, name=f'weights["{name}"]', atol=1e-5)


@pytest.mark.points(1, cell="check_transformer")
def test_transformer_ignores_source_padding(student, rng):
    _, mine, sizes = model_pair(student, rng)
    src, tgt_in = seq_batch(rng, sizes)
    longer = torch.cat([src, torch.full((src.shape[0], draw(rng, 1, 3)), PAD)], dim=1)
    first, _ = mine(src, tgt_in)
    second, _ = mine(longer, tgt_in)
    check_close(
        second, first, name="the logits tensor when the source gets extra padding", atol=1e-5
    )
    check_not_constant(first, name="the logits tensor", what="the source and target tokens")


@pytest.mark.points(1, cell="check_transformer")
def test_transformer_is_causal(student, rng):
    _, mine, sizes = model_pair(student, rng)
    src, tgt_in = seq_batch(rng, sizes)
    t = draw(rng, 1, tgt_in.shape[1] - 1)
    changed = tgt_in.clone()
    changed[:, t:] = torch.randint(3, sizes["tgt_vocab_size"], changed[:, t:].shape, generator=rng)
    first, _ = mine(src, tgt_in)
    second, _ = mine(src, changed)
    check_close(second[:, :t], first[:, :t], name=f"the logits tensor before position {t} "
                "when later target tokens change", atol=1e-5)  # fmt: skip
    check_not_constant(first, name="the logits tensor", what="the source and target tokens")


def shift_logit(ref: Transformer, token: int, delta: float) -> None:
    """Add exactly ``delta`` to every logit of ``token``.

    The decoder's output is y = gamma * z + beta (its last LayerNorm), where each z sums to 0.
    With beta = gamma, the row u = 1 / gamma gives u . y = sum(z) + C = C for every token, so
    adding delta * u / C to the token's row of the output projection shifts that logit by delta.
    """
    norm = ref.decoder_layers[-1].norm3
    with torch.no_grad():
        norm.bias.copy_(norm.weight)
        ref.out_proj.weight[token] += delta / norm.weight / norm.weight.numel()


def telling(want: torch.Tensor) -> bool:
    """Greedy outputs on which the usual mistakes show: a sequence ends with [EOS] while another
    goes on (so [PAD] follows an [EOS], and stopping at the first [EOS] is too early), and a
    sequence changes token before its end (so the arg-max of a fixed position is wrong)."""
    is_eos = want == EOS
    ended_early = (is_eos[:, :-1]).any()
    moves = ((want != want[:, :1]) & (want[:, :1] != EOS)).any()
    return bool(ended_early and moves and want.shape[1] >= 3)


def telling_model(student, rng):
    """A reference model (float64) and sources whose greedy decoding is ``telling``: [PAD] is
    never predicted (it appears only after [EOS]) and [EOS] is shifted until some sequences end
    early and others late. Asserts that the search succeeded."""
    for _ in range(20):
        ref, mine, sizes = model_pair(student, rng, dtype=torch.float64)
        src, _ = seq_batch(rng, sizes)
        src = torch.cat([src, src.flip(0)])  # a few more sequences
        max_new = draw(rng, 5, 8)
        shift_logit(ref, PAD, -1e4)
        start = {k: v.clone() for k, v in ref.state_dict().items()}
        for delta in (0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 3.0, -3.0, 4.0, 5.0):
            ref.load_state_dict(start)
            shift_logit(ref, EOS, delta)
            want = ref.greedy_decode(src, max_new_tokens=max_new)
            if telling(want):
                mine.load_state_dict(ref.state_dict())
                return ref, mine, src, max_new, want
    raise AssertionError("the test found no model whose greedy decoding ends at different steps")


@pytest.mark.points(2, cell="check_greedy_decode")
def test_greedy_decode_matches_reference(student, rng):
    _, mine, src, max_new, want = telling_model(student, rng)
    tokens = student.greedy_decode(mine, src, max_new)
    assert isinstance(tokens, torch.Tensor) and tokens.shape == want.shape, (
        f"tokens of shape {tuple(getattr(tokens, 'shape', ()))}, expected {tuple(want.shape)}"
    )
    assert torch.equal(tokens.long(), want), (
        f"the greedy tokens differ from the reference's:\n{tokens.tolist()}\nexpected\n"
        f"{want.tolist()}"
    )


@pytest.mark.points(1, cell="check_greedy_decode")
def test_greedy_decode_stopping(student, rng):
    ref, mine, sizes = model_pair(student, rng, dtype=torch.float64)
    src, _ = seq_batch(rng, sizes)
    max_new = draw(rng, 3, 6)
    shift_logit(ref, PAD, -1e4)
    shift_logit(ref, EOS, -1e4)  # never [EOS]
    mine.load_state_dict(ref.state_dict())
    want = ref.greedy_decode(src, max_new_tokens=max_new)
    tokens = student.greedy_decode(mine, src, max_new)
    assert isinstance(tokens, torch.Tensor) and tokens.shape == want.shape, (
        f"without [EOS] greedy_decode should produce max_new_tokens={max_new} tokens per "
        f"sequence, got shape {tuple(getattr(tokens, 'shape', ()))}"
    )
    assert torch.equal(tokens.long(), want), (
        f"without [EOS], the greedy tokens differ from the reference's:\n{tokens.tolist()}\n"
        f"expected\n{want.tolist()}"
    )
    shift_logit(ref, EOS, 2e4)  # always [EOS] first (the shifts add up to +1e4)
    mine.load_state_dict(ref.state_dict())
    tokens = student.greedy_decode(mine, src, max_new)
    assert isinstance(tokens, torch.Tensor) and tokens.shape == (src.shape[0], 1), (
        "when every sequence emits [EOS] first, greedy_decode should stop and return a (B, 1) "
        f"tensor of [EOS], got {getattr(tokens, 'tolist', lambda: tokens)()}"
    )
    assert torch.all(tokens == EOS), f"expected a (B, 1) tensor of [EOS], got {tokens.tolist()}"

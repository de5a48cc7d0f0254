"""GPT: a decoder-only, causal Transformer language model with a key/value cache.

Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" (GPT-2) and Brown et al.
2020, "Language Models are Few-Shot Learners" (GPT-3). Each block is pre-norm (GPT-2, Section 2.3):
``x = x + attn(ln_1(x))`` then ``x = x + mlp(ln_2(x))``; a final LayerNorm ``ln_f`` follows the last
block and the output projection shares its weights with the token embedding. Module names match
Hugging Face's ``GPT2LMHeadModel`` so that ``from_hf_gpt2`` is a key copy (plus a transpose: GPT-2
stores its linear layers as ``Conv1D`` with weights of shape (in, out)).

Generation: at every step only the new token is pushed through the network; the keys and values of
the earlier tokens are read from a :class:`KVCache`, which gives the same logits as recomputing the
whole prefix (tested to 1e-5) at a fraction of the cost (``benchmarks/kv_cache.py``).

Shapes: ``B`` batch, ``T`` tokens (the new ones), ``S`` tokens in the cache, ``C`` channels
(``n_embd``), ``H`` heads, ``D`` head dim (``C / H``), ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.layers import LayerNorm
from course_lib.models._family import alias, preset


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of a GPT; presets below reproduce GPT-2 and GPT-3 sizes."""

    vocab_size: int = 50257
    block_size: int = 1024  # longest sequence (number of learned positions)
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    activation: Literal["gelu", "gelu_tanh"] = "gelu_tanh"  # GPT-2 uses the tanh approximation
    layer_norm_eps: float = 1e-5
    fused_attn: bool = True  # torch's fused SDPA kernel; False = the lecture's manual path

    # The contract's names (course_lib.models._family); the fields keep GPT-2's names.
    embed_dim = alias("n_embd")
    depth = alias("n_layer")
    num_heads = alias("n_head")
    norm_eps = alias("layer_norm_eps")

    @property
    def mlp_ratio(self) -> float:
        """4.0: GPT-2's MLP is 4 x n_embd wide."""
        return 4.0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if self.activation not in ("gelu", "gelu_tanh"):
            raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {self.activation!r}")


class KVCache:
    """Keys and values of every layer for the tokens seen so far.

    One pre-allocated buffer per layer of shape (B, H, max_len, D) for keys and one for values;
    ``length`` counts the positions already written. The model advances ``length`` after each
    forward pass, so all layers of one pass write at the same positions.
    """

    def __init__(
        self,
        config: GPTConfig,
        *,
        batch_size: int,
        max_len: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if max_len > config.block_size:
            raise ValueError(
                f"a cache of {max_len} positions exceeds block_size={config.block_size}; "
                "generate fewer tokens or use use_cache=False, which crops the context"
            )
        shape = (batch_size, config.n_head, max_len, config.n_embd // config.n_head)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.values = [
            torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)
        ]
        self.max_len = max_len
        self.length = 0

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write new k, v (B, H, T, D) of ``layer``; return all keys and values (B, H, S, D)."""
        start, end = self.length, self.length + k.size(2)
        if end > self.max_len:
            raise ValueError(f"KVCache is full: {end} positions needed, {self.max_len} allocated")
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention with one fused q/k/v projection ``c_attn``.

    It does not reuse ``course_lib.attention.MultiHeadAttention`` because the cache must hold
    *projected* keys and values, which that module computes internally. ``config.dropout`` drops
    attention weights (while training) and the output projection, as in GPT-2 and nanoGPT.
    With a cache, the ``T`` new queries follow ``S - T`` cached tokens: query ``i`` sits at
    absolute position ``S - T + i`` and sees keys ``0 .. S - T + i``
    (``causal_mask(T, T_k=S)``).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.fused_attn = config.fused_attn
        self.dropout = config.dropout  # on the attention weights
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # W_Q, W_K, W_V side by side
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)  # W_O
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, *, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """x (B, T, C) -> (B, T, C); with a cache, x holds only the new tokens."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H, S, D)
        S = k.size(2)
        dropout_p = self.dropout if self.training else 0.0
        if self.fused_attn:
            if T == S:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:  # a single new token sees the whole cache: no mask needed
                mask = None if T == 1 else causal_mask(T, T_k=S, device=x.device)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        else:
            mask = causal_mask(T, T_k=S, device=x.device)
            y = scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward network C -> 4C -> C (names as in GPT-2 checkpoints)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden = int(config.mlp_ratio * config.n_embd)
        self.c_fc = nn.Linear(config.n_embd, hidden)
        self.c_proj = nn.Linear(hidden, config.n_embd)
        self.approximate = "tanh" if config.activation == "gelu_tanh" else "none"
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, C) -> (B, T, C)."""
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate)))


class Block(nn.Module):
    """Pre-norm Transformer decoder block (no cross-attention)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, *, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """x (B, T, C) -> (B, T, C)."""
        x = x + self.attn(self.ln_1(x), cache=cache, layer=layer)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """Decoder-only language model: token ids (B, T) -> next-token logits (B, T, V)."""

    def __init__(self, *, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                ln_f=LayerNorm(config.n_embd, eps=config.layer_norm_eps),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying (Press & Wolf 2017)
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(number of residual additions)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def hidden_states(self, idx: Tensor, *, cache: KVCache | None = None) -> Tensor:
        """Token ids (B, T) -> final hidden states after ``ln_f`` (B, T, C)."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(
                f"sequence of {start + T} tokens is longer than block_size={self.config.block_size}"
            )
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for layer, block in enumerate(self.transformer.h):
            x = block(x, cache=cache, layer=layer)  # (B, T, C)
        if cache is not None:
            cache.length += T
        return self.transformer.ln_f(x)

    def forward(self, idx: Tensor, *, cache: KVCache | None = None) -> Tensor:
        """Token ids (B, T) -> logits (B, T, V). With ``cache``, ``idx`` holds only new tokens."""
        return self.lm_head(self.hidden_states(idx, cache=cache))

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Tensor:
        """Extend the prompts ``idx`` (B, T) by ``max_new_tokens``; returns (B, T + max_new_tokens).

        ``greedy=True`` takes the arg-max; otherwise samples from softmax(logits / temperature)
        after the optional top-k and nucleus (top-p) filters. Without the cache the context is
        cropped to the last ``block_size`` tokens; with it, the total length must fit.
        """
        B, T = idx.shape
        cache = None
        if use_cache:
            dtype = self.lm_head.weight.dtype
            cache = KVCache(
                self.config,
                batch_size=B,
                max_len=T + max_new_tokens,
                device=idx.device,
                dtype=dtype,
            )
        context = idx  # what goes through the network this step
        for _ in range(max_new_tokens):
            if cache is None:
                context = idx[:, -self.config.block_size :]
            hidden = self.hidden_states(context, cache=cache)[:, -1, :]  # (B, C) last position
            logits = self.lm_head(hidden)  # (B, V)
            next_id = sample_next_token(
                logits,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                greedy=greedy,
                generator=generator,
            )  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
            context = next_id
        return idx


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits in the last dimension, set the others to -inf (ties kept)."""
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    k = min(k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter (Holtzman et al. 2020) over the last dimension of logits.

    Keeps the smallest set of most probable tokens whose probabilities sum to at least ``p`` and
    sets the other logits to -inf; the most probable token always stays.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above
    drop_sorted = mass_before >= p  # already reached p without this token
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Pick one token per row from logits (B, V); returns ids (B, 1)."""
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (got {temperature}); use greedy=True for argmax")
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.float().softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def from_hf_gpt2(hf_model: nn.Module) -> GPT:
    """A :class:`GPT` holding the weights of a Hugging Face ``GPT2LMHeadModel`` or ``GPT2Model``."""
    hf_config = hf_model.config
    activations = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
    if hf_config.activation_function not in activations:
        raise ValueError(
            f"cannot convert GPT-2 with activation {hf_config.activation_function!r}; "
            f"supported: {sorted(activations)}"
        )
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False) or not getattr(
        hf_config, "scale_attn_weights", True
    ):
        raise ValueError("only the standard 1/sqrt(D) attention scaling of GPT-2 is supported")
    config = GPTConfig(
        vocab_size=hf_config.vocab_size,
        block_size=hf_config.n_positions,
        n_layer=hf_config.n_layer,
        n_head=hf_config.n_head,
        n_embd=hf_config.n_embd,
        activation=activations[hf_config.activation_function],
        layer_norm_eps=hf_config.layer_norm_epsilon,
    )
    state = {k.removeprefix("transformer."): v for k, v in hf_model.state_dict().items()}
    if "lm_head.weight" in state and not torch.equal(state["lm_head.weight"], state["wte.weight"]):
        raise ValueError("this GPT-2 has an lm_head not tied to wte; course_lib's GPT always ties")
    model = GPT(config=config)
    ours = model.state_dict()
    for key in ours:
        if key == "lm_head.weight":
            continue  # tied to transformer.wte.weight
        hf_key = key.removeprefix("transformer.")
        if hf_key not in state:
            raise KeyError(f"{hf_key!r} not found in the Hugging Face state dict")
        value = state[hf_key]
        if key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            value = value.t()  # Conv1D stores (in, out); nn.Linear wants (out, in)
        ours[key] = value
    model.load_state_dict(ours)
    dtype = next(hf_model.parameters()).dtype
    return model.to(dtype=dtype).train(hf_model.training)


#: course_lib.interop.from_hf dispatches on these Hugging Face class names.
HF_CONVERTERS = {"GPT2Model": from_hf_gpt2, "GPT2LMHeadModel": from_hf_gpt2}

PRESETS: dict[str, Callable[..., nn.Module]] = {
    "gpt-tiny": preset(
        GPT, GPTConfig(vocab_size=128, block_size=64, n_layer=2, n_head=2, n_embd=32)
    ),
    "gpt2": preset(GPT, GPTConfig()),  # 124M
    "gpt2-medium": preset(GPT, GPTConfig(n_layer=24, n_head=16, n_embd=1024)),  # 355M
    "gpt2-large": preset(GPT, GPTConfig(n_layer=36, n_head=20, n_embd=1280)),  # 774M
    "gpt2-xl": preset(GPT, GPTConfig(n_layer=48, n_head=25, n_embd=1600)),  # 1.56B
    # GPT-3 (Brown et al. 2020, Table 2.1): build it on the meta device only
    "gpt3-175b": preset(GPT, GPTConfig(block_size=2048, n_layer=96, n_head=96, n_embd=12288)),
}

#: Overrides that make every preset tiny (tests/test_models_generic.py).
TINY = dict(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=16)


def example_batch(model: GPT, *, batch_size: int = 2) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Deterministic token ids for ``model(**inputs)`` and the logits' shape (B, T, V)."""
    T = min(8, model.config.block_size)
    generator = torch.Generator().manual_seed(0)
    idx = torch.randint(model.config.vocab_size, (batch_size, T), generator=generator)
    return {"idx": idx}, (batch_size, T, model.config.vocab_size)

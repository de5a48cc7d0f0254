"""Image captioning with attention over a CNN feature grid ("Show, Attend and Tell").

Xu et al., 2015, "Show, Attend and Tell: Neural Image Caption Generation with Visual Attention"
(ICML). A small CNN turns the image into an ``Hg x Wg`` grid of annotation vectors ``h_{i,j}``
(the paper's ``a_i``). At every word ``t`` the recurrent decoder scores each grid cell against its
previous state, ``e_{t,i,j} = f_att(s_{t-1}, h_{i,j})`` (additive attention, Bahdanau et al. 2015),
turns the scores into weights ``alpha_t = softmax(e_t)`` over the grid (Eq. 4-5), reads the context
``z_t = beta_t * sum_{i,j} alpha_{t,i,j} h_{i,j}`` with the gating scalar
``beta_t = sigmoid(f_beta(s_{t-1}))`` (Sec. 4.2.1) and feeds ``[E y_{t-1}; z_t]`` to the RNN.
The word distribution uses the paper's deep output layer (Eq. 7):
``p(y_t) ∝ exp(L_o(E y_{t-1} + L_h s_t + L_z z_t))``.

The encoder, ``greedy_decode`` and ``caption_loss`` are shared with the transformer captioner in
``course_lib.models.transformer_captioning``.

Shape legend: ``B`` batch, ``T`` caption tokens, ``C`` channels of the feature grid, ``Hg x Wg`` the
grid, ``L = Hg * Wg`` grid cells, ``V`` vocabulary, ``E`` word embedding size, ``S`` RNN state size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import AdditiveAttention
from course_lib.models._family import preset

__all__ = [
    "CaptionConfig",
    "ConvGridEncoder",
    "ShowAttendTell",
    "box_cell_mask",
    "caption_loss",
    "doubly_stochastic_penalty",
    "greedy_decode",
    "PRESETS",
]


@dataclass(frozen=True)
class CaptionConfig:
    """Hyper-parameters of the RNN-attention captioner (defaults: the synthetic scenes)."""

    vocab_size: int = 19  # len(course_lib.data.scenes.scene_vocab())
    in_channels: int = 3
    channels: int = 64  # C, width of the CNN and of each annotation vector h_{i,j}
    cnn_layers: int = 2  # each halves the resolution: a 32x32 image gives an 8x8 grid
    embed_dim: int = 32  # E
    hidden_dim: int = 128  # S
    attention_dim: int = 64  # hidden size of f_att
    rnn: Literal["gru", "lstm"] = "gru"
    max_len: int = 20  # longest caption greedy decoding produces (EOS included)
    dropout: float = 0.0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


class ConvGridEncoder(nn.Module):
    """Small CNN: image ``(B, C_in, H, W)`` -> feature grid ``(B, C, H / 2^n, W / 2^n)``.

    ``n`` times (3x3 convolution, ReLU, 2x2 max-pool), then one more 3x3 convolution and ReLU.

    Two coordinate channels (x and y in [-1, 1]) are appended to the input ("CoordConv",
    Liu et al. 2018) so every grid cell knows where it is; without them the decoder could tell
    *what* it attends to but not *where*, and could not say "left of".
    """

    def __init__(self, *, in_channels: int, channels: int, num_layers: int) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        layers: list[nn.Module] = []
        c_in = in_channels + 2
        for _ in range(num_layers):
            conv = nn.Conv2d(c_in, channels, kernel_size=3, padding=1)
            layers += [conv, nn.ReLU(), nn.MaxPool2d(2)]
            c_in = channels
        # One more convolution at grid resolution widens each cell's receptive field.
        layers += [nn.Conv2d(channels, channels, kernel_size=3, padding=1), nn.ReLU()]
        self.in_channels = in_channels
        self.num_layers = num_layers
        self.net = nn.Sequential(*layers)

    def forward(self, images: Tensor) -> Tensor:
        """images ``(B, C_in, H, W)`` -> grid ``(B, C, Hg, Wg)``."""
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"expected images of shape (B, {self.in_channels}, H, W), got {tuple(images.shape)}"
            )
        B, _, H, W = images.shape
        factor = 2**self.num_layers
        if H % factor or W % factor:
            raise ValueError(
                f"image size {H}x{W} must be divisible by 2**cnn_layers = {factor}; "
                "resize the images or change cnn_layers"
            )
        ys = torch.linspace(-1.0, 1.0, H, device=images.device, dtype=images.dtype)
        xs = torch.linspace(-1.0, 1.0, W, device=images.device, dtype=images.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")  # (H, W) each
        coords = torch.stack([grid_x, grid_y]).expand(B, 2, H, W)
        return self.net(torch.cat([images, coords], dim=1))  # (B, C, Hg, Wg)


def caption_loss(logits: Tensor, targets: Tensor, *, pad_id: int) -> Tensor:
    """Mean cross-entropy of logits ``(B, T, V)`` against targets ``(B, T)``, padding ignored."""
    if logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree on (B, T)"
        )
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)


def doubly_stochastic_penalty(attn: Tensor, mask: Tensor | None = None) -> Tensor:
    """Xu et al.'s Eq. 14 regulariser ``sum_ij (1 - sum_t alpha_{t,i,j})^2``, averaged over B.

    attn ``(B, T, Hg, Wg)``; mask ``(B, T)`` bool, True for real (non-padding) steps. Pushes the
    decoder to look at every cell about once over the whole caption.
    """
    if mask is not None:
        attn = attn * mask[:, :, None, None].to(attn.dtype)
    return ((1.0 - attn.sum(dim=1)) ** 2).flatten(1).sum(dim=1).mean()


def box_cell_mask(boxes: Tensor, *, grid_size: tuple[int, int], image_size: int) -> Tensor:
    """Which grid cells have their centre inside each box.

    boxes ``(..., 4)`` as ``(x0, y0, x1, y1)`` pixels, ``x1``/``y1`` exclusive (the scenes' boxes);
    grid_size ``(Hg, Wg)`` over a square image of ``image_size`` pixels -> bool ``(..., Hg, Wg)``.
    An attention map "lands on" an object when its arg-max cell is True here; the mean of the
    mask is the chance rate of a uniformly random peak.
    """
    Hg, Wg = grid_size
    ys = (torch.arange(Hg, device=boxes.device, dtype=boxes.dtype) + 0.5) * (image_size / Hg)
    xs = (torch.arange(Wg, device=boxes.device, dtype=boxes.dtype) + 0.5) * (image_size / Wg)
    x0, y0, x1, y1 = (boxes[..., i, None] for i in range(4))  # (..., 1) each
    inside_x = (x0 <= xs) & (xs < x1)  # (..., Wg)
    inside_y = (y0 <= ys) & (ys < y1)  # (..., Hg)
    return inside_y[..., :, None] & inside_x[..., None, :]  # (..., Hg, Wg)


StepFn = Callable[[Tensor], tuple[Tensor, Tensor | None]]


@torch.no_grad()
def greedy_decode(
    step: StepFn,
    *,
    batch_size: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Pick the most likely word at each step until every caption has emitted EOS.

    ``step(prefix)`` takes the tokens so far ``(B, t)`` (starting with BOS) and returns the
    next-word logits ``(B, V)`` and, optionally, that step's attention ``(B, ...)``. Returns tokens
    ``(B, T)`` without BOS, each row ending at its first EOS and padded with ``pad_id`` after it
    (``T <= max_len``), and the stacked attention ``(B, T, ...)`` (zeros after EOS), or None.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    attns: list[Tensor] = []
    for _ in range(max_len):
        logits, attn = step(prefix)
        next_token = logits.argmax(dim=-1)
        next_token = torch.where(finished, torch.full_like(next_token, pad_id), next_token)
        if attn is not None:
            keep = (~finished).to(attn.dtype).view(-1, *([1] * (attn.dim() - 1)))
            attns.append(attn * keep)
        prefix = torch.cat([prefix, next_token[:, None]], dim=1)
        finished = finished | (next_token == eos_id)
        if bool(finished.all()):
            break
    return prefix[:, 1:], (torch.stack(attns, dim=1) if attns else None)


class ShowAttendTell(nn.Module):
    """CNN grid encoder + attending GRU/LSTM decoder (Xu et al. 2015, soft attention)."""

    def __init__(self, *, config: CaptionConfig) -> None:
        super().__init__()
        if config.rnn not in ("gru", "lstm"):
            raise ValueError(f"rnn must be 'gru' or 'lstm', got {config.rnn!r}")
        self.config = config
        c, e, s = config.channels, config.embed_dim, config.hidden_dim
        self.encoder = ConvGridEncoder(
            in_channels=config.in_channels, channels=c, num_layers=config.cnn_layers
        )
        self.embed = nn.Embedding(config.vocab_size, e, padding_idx=config.pad_id)
        # Initial state from the mean annotation vector (Sec. 3.1.2).
        self.init_h = nn.Linear(c, s)
        self.init_c = nn.Linear(c, s) if config.rnn == "lstm" else None
        self.attention = AdditiveAttention(query_dim=s, key_dim=c, hidden_dim=config.attention_dim)
        self.f_beta = nn.Linear(s, 1)
        cell = nn.LSTMCell if config.rnn == "lstm" else nn.GRUCell
        self.rnn = cell(e + c, s)
        # Deep output layer, Eq. 7: L_o(E y_{t-1} + L_h s_t + L_z z_t).
        self.L_h = nn.Linear(s, e)
        self.L_z = nn.Linear(c, e)
        self.dropout = nn.Dropout(config.dropout)
        self.L_o = nn.Linear(e, config.vocab_size)

    def encode(self, images: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """images ``(B, C_in, H, W)`` -> annotations ``(B, L, C)`` and grid size ``(Hg, Wg)``."""
        grid = self.encoder(images)  # (B, C, Hg, Wg)
        Hg, Wg = grid.shape[-2:]
        return grid.flatten(2).transpose(1, 2), (Hg, Wg)  # (B, L, C)

    def init_state(self, annotations: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """annotations ``(B, L, C)`` -> initial RNN state: ``(B, S)``, or ``(h, c)`` for an LSTM."""
        mean = annotations.mean(dim=1)  # (B, C)
        h = torch.tanh(self.init_h(mean))
        if self.init_c is None:
            return h
        return h, torch.tanh(self.init_c(mean))

    def attend(self, s_prev: Tensor, annotations: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
        """z_t = sum_ij alpha_{t,i,j} h_{i,j} with alpha_t = softmax(v^T tanh(W_s s_{t-1} + W_h h)).

        The same as ``self.attention(s_prev, annotations)``, with ``keys = W_h h`` ``(B, L, A)``
        computed once per image (it does not depend on the step). Returns z ``(B, C)``, alpha
        ``(B, L)``.
        """
        att = self.attention
        hidden = torch.tanh(att.query_proj(s_prev)[:, None, :] + keys)  # (B, L, A)
        e = att.score(hidden).squeeze(-1)  # (B, L) scores e_{t,i,j}
        alpha = torch.softmax(e, dim=-1)  # (B, L)
        z = (alpha[:, None, :] @ annotations).squeeze(1)  # (B, 1, L) @ (B, L, C) -> (B, C)
        return z, alpha

    def step(
        self,
        word: Tensor,
        state: Tensor | tuple[Tensor, Tensor],
        annotations: Tensor,
        keys: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor], Tensor]:
        """One decoder step.

        word ``(B,)`` previous token ``y_{t-1}``; state ``s_{t-1}``; annotations ``(B, L, C)``;
        keys ``W_h h (B, L, A)`` (computed here if None). Returns logits ``(B, V)``, the new state
        ``s_t`` and attention weights ``alpha_t (B, L)``.
        """
        if keys is None:
            keys = self.attention.key_proj(annotations)
        s_prev = state[0] if isinstance(state, tuple) else state  # (B, S)
        z, alpha = self.attend(s_prev, annotations, keys)  # (B, C), (B, L)
        z = torch.sigmoid(self.f_beta(s_prev)) * z  # gating scalar beta_t
        y_prev = self.embed(word)  # (B, E)
        state = self.rnn(torch.cat([y_prev, z], dim=-1), state)
        s = state[0] if isinstance(state, tuple) else state  # (B, S)
        logits = self.L_o(self.dropout(y_prev + self.L_h(s) + self.L_z(z)))  # (B, V)
        return logits, state, alpha

    def forward(
        self, images: Tensor, tokens: Tensor, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing: images ``(B, C_in, H, W)``, tokens ``(B, T)`` = BOS + caption[:-1].

        Returns logits ``(B, T, V)`` predicting the caption, and with ``return_attn`` the
        per-word attention maps ``(B, T, Hg, Wg)`` (each map sums to 1).
        """
        if tokens.dim() != 2 or tokens.shape[0] != images.shape[0]:
            raise ValueError(
                f"tokens must be (B, T) with B = {images.shape[0]}, got {tuple(tokens.shape)}"
            )
        annotations, (Hg, Wg) = self.encode(images)
        keys = self.attention.key_proj(annotations)  # (B, L, A), the same at every step
        state = self.init_state(annotations)
        logits, alphas = [], []
        for t in range(tokens.shape[1]):
            step_logits, state, alpha = self.step(tokens[:, t], state, annotations, keys)
            logits.append(step_logits)
            alphas.append(alpha)
        logits_bt = torch.stack(logits, dim=1)  # (B, T, V)
        if not return_attn:
            return logits_bt
        attn = torch.stack(alphas, dim=1).unflatten(-1, (Hg, Wg))  # (B, T, Hg, Wg)
        return logits_bt, attn

    @torch.no_grad()
    def generate(
        self, images: Tensor, *, max_len: int | None = None, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Greedy captions ``(B, T)`` (no BOS; EOS, then padding); attention ``(B, T, Hg, Wg)``."""
        cfg = self.config
        annotations, (Hg, Wg) = self.encode(images)
        keys = self.attention.key_proj(annotations)  # (B, L, A)
        state = self.init_state(annotations)

        def step(prefix: Tensor) -> tuple[Tensor, Tensor]:
            nonlocal state
            logits, state, alpha = self.step(prefix[:, -1], state, annotations, keys)
            return logits, alpha

        tokens, attn = greedy_decode(
            step,
            batch_size=images.shape[0],
            max_len=max_len or cfg.max_len,
            bos_id=cfg.bos_id,
            eos_id=cfg.eos_id,
            pad_id=cfg.pad_id,
            device=images.device,
        )
        if not return_attn:
            return tokens
        return tokens, attn.unflatten(-1, (Hg, Wg))  # (B, T, Hg, Wg)


#: Contract names (course_lib.models._family) that do not apply to this recurrent family: it has
#: additive attention (no heads, no fused kernel), no blocks and no LayerNorm; its ``embed_dim``
#: is the width of the word embeddings.
CONTRACT_EXEMPT = ("depth", "num_heads", "mlp_ratio", "norm_eps", "fused_attn")


PRESETS: dict[str, Callable[..., nn.Module]] = {
    "caption-rnn-attn": preset(ShowAttendTell, CaptionConfig()),
    "caption-rnn-attn-lstm": preset(ShowAttendTell, CaptionConfig(rnn="lstm")),
}


# Generic model test protocol (tests/test_models_generic.py).
TINY: dict[str, object] = {
    "channels": 8,
    "cnn_layers": 1,
    "embed_dim": 8,
    "hidden_dim": 16,
    "attention_dim": 8,
}


def example_batch(
    model: nn.Module, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Dummy ``images (B, C_in, 8, 8)`` and teacher-forcing ``tokens (B, 5)`` (BOS, words, padding),
    with the expected logits shape ``(B, 5, V)``."""
    cfg = model.config
    side = 2**cfg.cnn_layers * 2
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(batch_size, cfg.in_channels, side, side, generator=generator)
    tokens = torch.randint(3, cfg.vocab_size, (batch_size, 5), generator=generator)
    tokens[:, 0] = cfg.bos_id
    tokens[0, -1] = cfg.pad_id
    return {"images": images, "tokens": tokens}, (batch_size, 5, cfg.vocab_size)

"""The answer key of A3 (instructors only: it lives beside the hidden suite, never in course_lib).

CANARY-HIDDEN-A3-95ae27f0: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

The hidden tests compute their expectations with it; ``a3_record.py`` runs it on the visible
checks' inputs and records the answers as data (``course_lib/checks/recorded/a3_transformer.pt``);
``tests/course/test_a3_key.py`` checks it against independent oracles (``torch.nn.RMSNorm``,
``F.cross_entropy(label_smoothing=...)``, exhaustive search on tiny vocabularies).

Shape legend: B batch, S source tokens, T target tokens, C channels, H heads, V vocabulary,
K beams.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * self.weight


class FeedForward(nn.Module):
    """fc2(relu(fc1(x))), as the notebook gives it."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class PreNormEncoderBlock(nn.Module):
    """x = x + SelfAttention(RMSNorm(x)); x = x + FFN(RMSNorm(x))."""

    def __init__(self, *, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.norm2 = RMSNorm(d_model)
        self.ff = FeedForward(d_model, d_ff)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        a, weights = self.self_attn(self.norm1(x), mask=mask, return_weights=True)
        x = x + a
        x = x + self.ff(self.norm2(x))
        return x, weights


class PreNormDecoderBlock(nn.Module):
    """y = y + MaskedSelfAttention(RMSNorm(y)); y = y + CrossAttention(RMSNorm(y), memory);
    y = y + FFN(RMSNorm(y)). The memory is used as given (the encoder normalised it)."""

    def __init__(self, *, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.norm2 = RMSNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.norm3 = RMSNorm(d_model)
        self.ff = FeedForward(d_model, d_ff)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        a, w_self = self.self_attn(self.norm1(y), mask=self_mask, return_weights=True)
        y = y + a
        a, w_cross = self.cross_attn(
            self.norm2(y), memory, memory, mask=memory_mask, return_weights=True
        )
        y = y + a
        y = y + self.ff(self.norm3(y))
        return y, (w_self, w_cross)


def label_smoothed_cross_entropy(
    logits: Tensor, target: Tensor, smoothing: float = 0.1, ignore_index: int = 0
) -> Tensor:
    """Mean over the non-ignored targets of (1 - eps) * NLL + eps * mean_v(-log p_v)."""
    log_probs = logits.log_softmax(dim=-1)  # (..., V)
    keep = target != ignore_index  # (...)
    safe = target.masked_fill(~keep, 0)  # any valid id: ignore_index may be -100
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # (...)
    loss = (1 - smoothing) * nll + smoothing * uniform
    return loss[keep].mean()


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    *,
    beam_size: int = 4,
    max_new_tokens: int = 20,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
) -> tuple[Tensor, Tensor]:
    """The K best hypotheses per sentence: tokens (B, K, T) and their log-probabilities (B, K).

    ``model.encode(src, src_mask) -> memory`` and ``model.decode(tokens, memory, src_mask) ->
    logits``. All B sentences are searched at once, as B * K rows.
    """
    B, K = src.shape[0], beam_size
    src_mask = src != pad_id  # (B, S)
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)  # (B*K, S, C)
    src_mask = src_mask.repeat_interleave(K, dim=0)  # (B*K, S)
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.full((B, K), float("-inf"), dtype=torch.float64, device=src.device)
    scores[:, 0] = 0.0  # one live hypothesis, [BOS], at the start
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    for _ in range(max_new_tokens):
        logits = model.decode(tokens, memory, src_mask)[:, -1]  # (B*K, V)
        V = logits.shape[-1]
        log_probs = logits.double().log_softmax(dim=-1).view(B, K, V)
        candidates = scores[:, :, None] + log_probs  # (B, K, V)
        prefixes = tokens.view(B, K, -1)[:, :, 1:].tolist()
        for b in range(B):
            for k in range(K):
                score = candidates[b, k, eos_id].item()
                if score > float("-inf"):
                    finished[b].append((score, prefixes[b][k] + [eos_id]))
        candidates[:, :, eos_id] = float("-inf")  # a finished hypothesis leaves the beam
        scores, index = candidates.view(B, K * V).topk(K, dim=-1)  # (B, K)
        rows = index // V + torch.arange(B, device=src.device)[:, None] * K  # (B, K)
        tokens = torch.cat([tokens[rows.flatten()], (index % V).view(-1, 1)], dim=1)
    prefixes = tokens.view(B, K, -1)[:, :, 1:].tolist()
    for b in range(B):
        for k in range(K):
            if scores[b, k] > float("-inf"):
                finished[b].append((scores[b, k].item(), prefixes[b][k]))
    best = [sorted(found, key=lambda f: -f[0])[:K] for found in finished]
    T = max(len(ids) for found in best for _, ids in found)
    out = torch.full((B, K, T), pad_id, dtype=torch.long)
    out_scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    for b, found in enumerate(best):
        for k, (score, ids) in enumerate(found):
            out[b, k, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            out_scores[b, k] = score
    return out.to(src.device), out_scores.to(src.device)

"""BERT's masked-language-model corruption: choose 15% of the tokens, then 80/10/10.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", Section 3.1 (Task #1: Masked LM) and Appendix C.2: each ordinary token is chosen
for prediction with probability ``prob``; a chosen token is replaced by ``[MASK]`` 80% of the time,
by a random token 10% of the time and kept unchanged 10% of the time. The model must predict the
original token at every chosen position; all other positions carry the label ``IGNORE_INDEX``
(-100, what ``torch.nn.functional.cross_entropy`` skips by default). Special tokens ([PAD], [CLS],
[SEP], ...) are never chosen.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["IGNORE_INDEX", "mask_tokens"]

IGNORE_INDEX = -100


def mask_tokens(
    ids: Tensor,
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: Iterable[int],
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Corrupt token ids for masked-LM training.

    Args:
        ids: integer token ids of any shape, e.g. (B, T); not modified.
        vocab_size: number of token ids; random replacements are drawn uniformly from the
            non-special ids in ``[0, vocab_size)``.
        mask_id: id of ``[MASK]``.
        special_ids: ids that are never chosen (padding, [CLS], [SEP], [MASK], ...).
        prob: probability that an ordinary token is chosen for prediction.
        generator: random generator for reproducible masks.

    Returns:
        ``(inputs, labels)``, both shaped like ``ids``: ``inputs`` is the corrupted sequence;
        ``labels`` holds the original id at chosen positions and ``IGNORE_INDEX`` elsewhere.
    """
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise TypeError(f"ids must be an integer tensor of token ids, got dtype {ids.dtype}")
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must be in [0, 1], got {prob}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id={mask_id} is outside the vocabulary [0, {vocab_size})")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"ids must lie in [0, vocab_size={vocab_size}); check vocab_size")
    special = torch.tensor(sorted({int(i) for i in special_ids} | {mask_id}), dtype=torch.long)
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special[special < vocab_size]] = False
    candidates = ordinary.nonzero().squeeze(1)  # ids a random replacement may take
    if candidates.numel() == 0:
        raise ValueError("every id in the vocabulary is special; nothing can be masked")

    device = generator.device if generator is not None else ids.device
    chosen_p, action_p = torch.rand((2, *ids.shape), generator=generator, device=device)
    picks = torch.randint(
        candidates.numel(), ids.shape, generator=generator, device=device
    )  # index into candidates
    chosen_p, action_p, picks = (
        chosen_p.to(ids.device),
        action_p.to(ids.device),
        picks.to(ids.device),
    )

    chosen = (chosen_p < prob) & ~torch.isin(ids, special.to(ids.device))
    to_mask = chosen & (action_p < 0.8)
    to_random = chosen & (action_p >= 0.8) & (action_p < 0.9)  # the last 10% stay unchanged

    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, candidates.to(ids.device)[picks].to(ids.dtype), inputs)
    return inputs, labels

"""Winnowing (Schleimer, Wilkerson and Aiken 2003): hashes of k-token windows, the minimum of
every ``window`` consecutive hashes kept, each with the token positions where it starts."""

from __future__ import annotations

import hashlib

K = 6  # tokens per k-gram
WINDOW = 3  # winnowing window (in k-grams)


def fingerprints(tokens: list[str], k: int = K, window: int = WINDOW) -> dict[int, list[int]]:
    """Winnowed k-gram hashes -> the token positions where each k-gram starts."""
    if len(tokens) < k:
        grams = [" ".join(tokens)] if tokens else []
    else:
        grams = [" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)]
    hashes = [
        int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") for g in grams
    ]
    if not hashes:
        return {}
    kept: set[int] = set()
    w = max(1, min(window, len(hashes)))
    for start in range(len(hashes) - w + 1):
        kept.add(min(hashes[start : start + w]))
    # every occurrence of a kept hash is a match position
    chosen: dict[int, list[int]] = {}
    for i, h in enumerate(hashes):
        if h in kept:
            chosen.setdefault(h, []).append(i)
    return chosen

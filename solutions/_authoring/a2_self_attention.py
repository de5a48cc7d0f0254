# ruff: noqa: E501 (the strings are notebook cells; build.py formats them in the notebook)
"""Source of assignment A2 (``solutions/a2_self_attention/a2_self_attention.ipynb``) and samples.

Run ``python solutions/_authoring/build.py a2_self_attention``, then ``make release``.
"""

from __future__ import annotations

from nbtools import Builder

NAME = "a2_self_attention"

DOT = '''
def dot_product_attention(q: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
    """One query q (D,) attends over N input vectors X (N, D), which serve as keys and values:
    e_i = q . x_i, a = softmax(e), y = sum_i a_i x_i. Returns (y (D,), a (N,)). No Python loops.
    """
    ### BEGIN SOLUTION
    e = X @ q  # (N,) similarities
    a = torch.softmax(e, dim=0)  # (N,)
    return a @ X, a  # (D,), (N,)
    ### END SOLUTION
'''

SDPA = '''
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Y = softmax(Q K^T / sqrt(D)) V for many queries at once, written out (no loops).

    q (..., N_Q, D), k (..., N_X, D), v (..., N_X, D_V), with the same leading (batch) dims;
    mask: boolean keep-mask broadcastable to (..., N_Q, N_X), True = may attend.
    Returns (y (..., N_Q, D_V), weights (..., N_Q, N_X)). A query whose keys are all masked
    gets zero weights and a zero output (not NaN).
    """
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N_Q, N_X)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # fully masked rows -> 0
    return weights @ v, weights  # (..., N_Q, D_V), (..., N_Q, N_X)
    ### END SOLUTION
'''

LAYER = '''
class AttentionLayer(nn.Module):
    """Queries attend over inputs: K = X W_K, V = X W_V, Y = attention(Q, K, V).

    forward(q (B, N_Q, D_Q), x (B, N_X, D_X), mask=None keep-mask broadcastable to
    (B, N_Q, N_X)) -> (y (B, N_Q, D_V), weights (B, N_Q, N_X)).
    """

    def __init__(self, *, query_dim: int, input_dim: int, value_dim: int):
        super().__init__()
        self.k_proj = nn.Linear(input_dim, query_dim, bias=False)  # W_K
        self.v_proj = nn.Linear(input_dim, value_dim, bias=False)  # W_V

    def forward(self, q: Tensor, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        return scaled_dot_product_attention(q, self.k_proj(x), self.v_proj(x), mask)
        ### END SOLUTION
'''

SELF = '''
class SelfAttention(nn.Module):
    """Self-attention: the queries come from the inputs too, Q = X W_Q, K = X W_K, V = X W_V.

    forward(x (B, T, D_X), mask=None keep-mask broadcastable to (B, T, T))
    -> (y (B, T, D_V), weights (B, T, T)).
    """

    def __init__(self, *, input_dim: int, query_dim: int | None = None, value_dim: int | None = None):
        super().__init__()
        query_dim = input_dim if query_dim is None else query_dim
        value_dim = input_dim if value_dim is None else value_dim
        self.q_proj = nn.Linear(input_dim, query_dim, bias=False)  # W_Q
        self.k_proj = nn.Linear(input_dim, query_dim, bias=False)  # W_K
        self.v_proj = nn.Linear(input_dim, value_dim, bias=False)  # W_V

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        return scaled_dot_product_attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), mask)
        ### END SOLUTION
'''

MASKS = '''
def causal_mask(T: int) -> Tensor:
    """Boolean keep-mask (T, T): query i may attend to key j iff j <= i."""
    ### BEGIN SOLUTION
    return torch.ones(T, T, dtype=torch.bool).tril()
    ### END SOLUTION


def padding_mask(lengths: Tensor, T: int) -> Tensor:
    """Boolean keep-mask (B, T): True at the first lengths[b] positions of row b (real tokens).

    To mask keys in attention, use padding_mask(lengths, T)[:, None, :] (B, 1, T).
    """
    ### BEGIN SOLUTION
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]
    ### END SOLUTION
'''

HEADS = '''
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, T, C) -> (B, H, T, D) with H = num_heads and D = C / H: channel block h goes to head h."""
    ### BEGIN SOLUTION
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, H, T, D)
    ### END SOLUTION


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, D) -> (B, T, H * D): the inverse of split_heads (heads concatenated)."""
    ### BEGIN SOLUTION
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, C)
    ### END SOLUTION
'''

MHA = '''
class MultiHeadAttention(nn.Module):
    """Multi-head attention, equal to nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
    given the same weights: head_h = attention(Q W_Q^h, K W_K^h, V W_V^h), Y = [head_1 ... head_H] W_O.

    forward(query (B, T_q, C), key (B, T_k, C) = query, value (B, T_k, C) = key, mask=None
    keep-mask broadcastable to (B, H, T_q, T_k)) -> (y (B, T_q, C), weights (B, H, T_q, T_k)).
    """

    def __init__(self, *, embed_dim: int, num_heads: int):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        key = query if key is None else key
        value = key if value is None else value
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T_q, D)
        k = split_heads(self.k_proj(key), self.num_heads)  # (B, H, T_k, D)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, H, T_k, D)
        y, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T_q, D)
        return self.out_proj(merge_heads(y)), weights
        ### END SOLUTION
'''

PE = '''
def sinusoidal_positional_encoding(T: int, d: int) -> Tensor:
    """Vaswani et al. (2017), Section 3.5: a (T, d) float32 table with, for t < T and k < d / 2,
    PE[t, 2k] = sin(t / 10000^(2k / d)) and PE[t, 2k + 1] = cos(t / 10000^(2k / d)). d is even.
    """
    ### BEGIN SOLUTION
    t = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d / 2,)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe.float()
    ### END SOLUTION
'''

PERMUTATION = """
torch.manual_seed(0)
layer = SelfAttention(input_dim=16)
x = torch.randn(1, 6, 16)  # (B, T, C)
perm = torch.randperm(6)  # a reordering of the 6 tokens
# Compute the two largest differences:
#   without: max |f(x[:, perm]) - f(x)[:, perm]|             (no positional information)
#   with_pe: max |f(x[:, perm] + PE) - f(x + PE)[:, perm]|   (positions added after permuting)
# where f(.) is layer(.)[0] and PE = sinusoidal_positional_encoding(6, 16).
### BEGIN SOLUTION
with torch.no_grad():
    y, _ = layer(x)
    y_perm, _ = layer(x[:, perm])
    without = (y_perm - y[:, perm]).abs().max().item()
    pe = sinusoidal_positional_encoding(6, 16)
    z, _ = layer(x + pe)
    z_perm, _ = layer(x[:, perm] + pe)
    with_pe = (z_perm - z[:, perm]).abs().max().item()
### END SOLUTION
print(f"without positions: max |f(Px) - P f(x)|           = {without:.2e}")
print(f"with positions:    max |f(Px + PE) - P f(x + PE)| = {with_pe:.2e}")
"""

FIT = '''
def fit_power_law(n: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares fit of y ~ c * n^p in log-log space: log y = p log n + log c.

    n, y: sequences of positive numbers of equal length (at least 2). Returns (p, c) as floats.
    """
    ### BEGIN SOLUTION
    log_n = torch.log(torch.as_tensor(n, dtype=torch.float64))
    log_y = torch.log(torch.as_tensor(y, dtype=torch.float64))
    A = torch.stack([log_n, torch.ones_like(log_n)], dim=1)  # (N, 2)
    p, log_c = torch.linalg.lstsq(A, log_y[:, None]).solution[:, 0].tolist()
    return p, math.exp(log_c)
    ### END SOLUTION
'''


def build() -> Builder:
    nb = Builder()
    nb.md(
        r"""
        # A2: The attention layer, step by step

        From one query attending over a handful of vectors to multi-head self-attention that
        matches `torch.nn.MultiheadAttention` to the last digit, following the lecture's
        notation: queries $Q$ ($N_Q \times D$), keys $K$ and values $V$ ($N_X \times D$ and
        $N_X \times D_V$),
        $$E = \frac{Q K^\top}{\sqrt{D}}, \qquad A = \mathrm{softmax}(E) \text{ (over each row)},
        \qquad Y = A V.$$

        **Learning goals.** After this assignment you can
        1. write (scaled) dot-product attention for any number of queries and any batch shape,
           without loops, and explain the $\sqrt{D}$ with a measurement;
        2. build an attention layer with key and value projections, self-attention, and causal
           and padding masks;
        3. split the channels into heads and reproduce `nn.MultiheadAttention` exactly;
        4. explain why self-attention needs positional encodings (permutation equivariance) and
           write the sinusoidal ones;
        5. measure how the time and memory of attention grow with the sequence length.
        """,
        gid="intro",
    )
    nb.md(
        r"""
        ## What is graded

        | step | graded by | points |
        |---|---|---|
        | 1. `dot_product_attention` (one query) | hidden tests | 2 |
        | 2. `scaled_dot_product_attention` | hidden tests | 4 |
        | 3. `AttentionLayer` | hidden tests | 2 |
        | 4. `SelfAttention` | hidden tests | 2 |
        | 5. `causal_mask`, `padding_mask` | hidden tests | 3 |
        | 6. `split_heads`, `merge_heads` | hidden tests | 2 |
        | 7. `MultiHeadAttention` | hidden tests | 5 |
        | 8. `sinusoidal_positional_encoding` | hidden tests | 2 |
        | 9. `fit_power_law` | hidden tests | 1 |
        | Q1 why $\sqrt{D}$ | by hand | 2 |
        | Q2 permutation equivariance | by hand | 2 |
        | Q3 time and memory versus length | by hand | 2 |
        | **total** | | **29** (23 automatic + 6 by hand) |

        **How the automatic grading works.** Each step has a *visible check* below it, whose
        message says what is wrong. The grade comes from *hidden tests* run by the instructor
        on your notebook with other random sizes and inputs: they compare your code with a
        reference (or with PyTorch's own modules) given the same weights, and check properties
        such as causality. Only your imports, functions, classes and constants are graded;
        experiment cells are not run by the grader.

        **Rules.** Keep the signatures and the parameter names of the given `__init__` methods.
        Write attention yourself: **the grader fails a test whose code calls**
        `torch.nn.functional.scaled_dot_product_attention`, `nn.MultiheadAttention`
        (or `F.multi_head_attention_forward`), or any of `course_lib`'s reference
        implementations (`course_lib.attention`, `course_lib.positional`, ...), directly or
        through an alias. These would do the work this assignment is about, and the fused kernel
        would also hide the attention weights you are asked to return. `torch.softmax`,
        `nn.Linear`, matrix products and reshapes are all fine.
        """,
        gid="grading",
    )
    nb.provided(
        """
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        from torch import Tensor, nn
        from tqdm.auto import tqdm

        from course_lib.gpu import peak_memory, time_fn

        torch.set_num_threads(1)  # small tensors: one thread is as fast and timings are steadier
        """,
        gid="setup",
    )

    # 1
    nb.md(
        r"""
        ## 1. One query, dot products (2 points)

        The simplest attention: a query $q \in \mathbb{R}^D$ scores each input vector $x_i$ by
        the dot product $e_i = q \cdot x_i$, turns the scores into weights $a = \mathrm{softmax}(e)$
        and returns the weighted average $y = \sum_i a_i x_i$. The inputs serve as keys and as
        values. Use matrix products, not a loop over $i$.
        """,
        gid="dot_md",
    )
    nb.solution(DOT, gid="dot_product_attention")
    nb.check(
        """
        from course_lib.checks.a2 import check_dot_product_attention

        check_dot_product_attention(dot_product_attention)
        """,
        gid="check_dot_product_attention",
        points=2,
    )

    # 2
    nb.md(
        r"""
        ## 2. Many queries, scaled, masked (4 points)

        Now $N_Q$ queries at once, separate keys and values, and any number of leading batch
        dimensions: `q @ k.transpose(-2, -1)` does all the dot products. Divide the scores by
        $\sqrt{D}$ (the experiment below shows why). A *mask* says which keys each query may
        attend to (`True` = may attend); masked scores must get weight exactly 0, so fill them
        with a very negative number (`torch.finfo(dtype).min`) **before** the softmax. A query
        that may attend to nothing gets zero weights and a zero output.
        """,
        gid="sdpa_md",
    )
    nb.solution(SDPA, gid="scaled_dot_product_attention")
    nb.check(
        """
        from course_lib.checks.a2 import check_scaled_dot_product_attention

        check_scaled_dot_product_attention(scaled_dot_product_attention)
        """,
        gid="check_scaled_dot_product_attention",
        points=4,
    )
    nb.md(
        r"""
        ### Why $\sqrt{D}$?

        If the entries of $q$ and $k$ are independent with mean 0 and variance 1, the dot
        product $q \cdot k = \sum_{j=1}^D q_j k_j$ is a sum of $D$ terms of variance 1. The cell
        measures the variance of the scores and how peaked the softmax over 32 keys becomes, with
        and without the scaling, as $D$ grows.
        """,
        gid="variance_md",
    )
    nb.provided(
        """
        dims = [4, 16, 64, 256, 1024]
        generator = torch.Generator().manual_seed(0)
        rows = []
        for D in dims:
            q = torch.randn(2000, 1, D, generator=generator)
            k = torch.randn(2000, 32, D, generator=generator)
            scores = (q @ k.transpose(-2, -1)).squeeze(1)  # (2000, 32)
            for name, s in (("q.k", scores), ("q.k / sqrt(D)", scores / math.sqrt(D))):
                top = s.softmax(dim=-1).max(dim=-1).values.mean().item()
                rows.append((D, name, s.var().item(), top))
        print(f"{'D':>5} {'scores':>14} {'variance':>9} {'mean largest weight':>20}")
        for D, name, var, top in rows:
            print(f"{D:>5} {name:>14} {var:>9.2f} {top:>20.3f}")
        fig, ax = plt.subplots(figsize=(5, 3))
        for name in ("q.k", "q.k / sqrt(D)"):
            ax.loglog(dims, [r[2] for r in rows if r[1] == name], marker="o", label=name)
        ax.set_xlabel("D")
        ax.set_ylabel("variance of the scores")
        ax.legend()
        plt.show()
        """,
        gid="variance",
    )
    nb.written(
        r"""
        **Q1 (2 points).** What do you measure for the variance of $q \cdot k$ as a function
        of $D$, and after dividing by $\sqrt{D}$? What happens to the softmax's largest weight
        without the scaling as $D$ grows, and why is that bad for *learning* (think of the
        softmax's gradient)?
        """,
        """
        The variance of q.k grows linearly with D (about 4, 16, 64, 256, 1024: the sum of D
        independent products of variance 1), so its standard deviation grows like sqrt(D);
        dividing by sqrt(D) brings the variance back to about 1 for every D. Without the scaling
        the scores of large D differ by tens, the softmax saturates: its largest weight goes to
        almost 1 (one-hot attention) already at initialisation. In that regime the softmax's
        Jacobian diag(a) - a a^T is nearly zero (a_i(1 - a_i) ~ 0 for every i), so almost no
        gradient flows to the queries and keys and learning stalls; with the scaling the
        weights stay soft and the gradients useful whatever the head size.
        """,
        gid="q1_scaling",
        points=2,
    )

    # 3-4
    nb.md(
        r"""
        ## 3. Key and value projections (2 points)

        An attention *layer* learns what to compare and what to return: the inputs $X$ are
        projected to keys $K = X W_K$ and values $V = X W_V$ (here without biases) and the
        queries attend over them. Use your `scaled_dot_product_attention`.
        """,
        gid="layer_md",
    )
    nb.solution(LAYER, gid="attention_layer")
    nb.check(
        """
        from course_lib.checks.a2 import check_attention_layer

        check_attention_layer(AttentionLayer)
        """,
        gid="check_attention_layer",
        points=2,
    )
    nb.md(
        r"""
        ## 4. Self-attention (2 points)

        In self-attention every input vector also produces a query, $Q = X W_Q$: each token
        attends over all tokens of the same sequence.
        """,
        gid="self_md",
    )
    nb.solution(SELF, gid="self_attention")
    nb.check(
        """
        from course_lib.checks.a2 import check_self_attention

        check_self_attention(SelfAttention)
        """,
        gid="check_self_attention",
        points=2,
    )

    # 5
    nb.md(
        r"""
        ## 5. Causal and padding masks (3 points)

        A language model that predicts token $t+1$ must not look at tokens after $t$: a
        **causal** mask lets query $i$ see keys $j \le i$. A batch of sequences of different
        lengths is padded at the end; a **padding** mask marks the real tokens. Both are boolean
        *keep*-masks (True = may attend) and combine with `&`. The check also verifies, with
        your `SelfAttention`, that under a causal mask changing future tokens never changes
        past outputs.
        """,
        gid="masks_md",
    )
    nb.solution(MASKS, gid="masks")
    nb.check(
        """
        from course_lib.checks.a2 import check_masks

        check_masks(causal_mask, padding_mask, SelfAttention)
        """,
        gid="check_masks",
        points=3,
    )

    # 6-7
    nb.md(
        r"""
        ## 6. Splitting into heads (2 points)

        Multi-head attention runs $H$ attentions side by side on $D = C / H$ channels each.
        With the projections computed for all heads at once as $(B, T, C)$ tensors, head $h$ owns
        channels $hD, \dots, (h+1)D - 1$. Reshape to $(B, T, H, D)$ and move the head axis in
        front of the tokens: $(B, H, T, D)$, so that your attention function treats $(B, H)$
        as batch dimensions. `merge_heads` undoes it (concatenates the heads).
        """,
        gid="heads_md",
    )
    nb.solution(HEADS, gid="heads")
    nb.check(
        """
        from course_lib.checks.a2 import check_heads

        check_heads(split_heads, merge_heads)
        """,
        gid="check_heads",
        points=2,
    )
    nb.md(
        r"""
        ## 7. Multi-head attention, equal to `nn.MultiheadAttention` (5 points)

        $\mathrm{head}_h = \mathrm{attention}(Q W_Q^h, K W_K^h, V W_V^h)$ and
        $Y = [\mathrm{head}_1, \dots, \mathrm{head}_H] W_O$, with biases on all four
        projections, as in PyTorch. Given the same weights your module must give the same output
        as `nn.MultiheadAttention(C, H, batch_first=True)` (whose `in_proj_weight` stacks
        $W_Q, W_K, W_V$) and the same per-head weights (`average_attn_weights=False`).
        Careful: PyTorch's boolean `attn_mask` means the opposite of ours (True = *not* allowed).
        """,
        gid="mha_md",
    )
    nb.solution(MHA, gid="multihead_attention")
    nb.check(
        """
        from course_lib.checks.a2 import check_multihead_attention

        check_multihead_attention(MultiHeadAttention)
        """,
        gid="check_multihead_attention",
        points=5,
    )

    # 8-9 positions
    nb.md(
        r"""
        ## 8. Sinusoidal positional encoding (2 points)

        Attention compares contents only: nothing in $Y = \mathrm{softmax}(QK^\top/\sqrt{D})V$
        depends on where a token sits. The Transformer adds to each token's embedding a
        vector that depends on its position $t$: pairs of coordinates rotating at geometrically
        spaced frequencies $\omega_k = 10000^{-2k/d}$, so that nearby positions get similar
        codes and a fixed offset is a fixed rotation.
        """,
        gid="pe_md",
    )
    nb.solution(PE, gid="positional_encoding")
    nb.check(
        """
        from course_lib.checks.a2 import check_positional_encoding

        check_positional_encoding(sinusoidal_positional_encoding)
        plt.figure(figsize=(6, 2.5))
        plt.imshow(sinusoidal_positional_encoding(64, 32).T, aspect="auto", cmap="RdBu")
        plt.xlabel("position t")
        plt.ylabel("coordinate")
        plt.colorbar()
        plt.show()
        """,
        gid="check_positional_encoding",
        points=2,
    )
    nb.md(
        r"""
        ### Permutation equivariance, and how positions break it

        Reordering the tokens of $x$ by a permutation $P$ reorders the outputs of
        self-attention in the same way: $f(Px) = P f(x)$. Show it numerically, then add the
        positional encoding *after* permuting (the tokens now sit at new positions) and show
        that the equality is lost.
        """,
        gid="perm_md",
    )
    nb.solution(PERMUTATION, gid="permutation")
    nb.written(
        r"""
        **Q2 (2 points).** Report your two numbers. Why is self-attention without positions
        permutation equivariant (argue from the formula), and what would that mean for a
        model reading "dog bites man" versus "man bites dog"? Why does adding the positional
        encoding break it?
        """,
        """
        Without positions the difference is at rounding level (~1e-7); with positions it is of
        order 0.1-1. Permuting the rows of X permutes the rows of Q, K and V (they are row-wise
        linear maps); the score matrix becomes P E P^T, the row-wise softmax commutes with that,
        and (P A P^T)(P V) = P (A V). So every token's output depends on the *set* of the other
        tokens, not on their order: "dog bites man" and "man bites dog" give the same outputs
        for each word, only listed in another order, and a model on top (e.g. pooling) cannot
        tell who bites whom. Adding PE_t to the token at position t makes each input depend on
        its position: after the permutation a token carries a different position code, so its
        query, key and value change and the outputs are no longer a reordering of the old ones.
        """,
        gid="q2_permutation",
        points=2,
    )

    # Complexity
    nb.md(
        r"""
        ## 9. Time and memory versus sequence length (1 point)

        Self-attention compares every token with every other: the score matrix has $T^2$
        entries. Fit the exponent $p$ of a power law $y \approx c\,n^p$ by least squares on
        $\log y = p \log n + \log c$ (a straight line in a log-log plot). Then the cell below
        measures your `SelfAttention`'s forward time (`course_lib.gpu.time_fn`, the median of
        repeats) and its peak extra memory (`course_lib.gpu.peak_memory`) for growing $T$.
        """,
        gid="fit_md",
    )
    nb.solution(FIT, gid="fit_power_law")
    nb.check(
        """
        from course_lib.checks.a2 import check_fit_power_law

        check_fit_power_law(fit_power_law)
        """,
        gid="check_fit_power_law",
        points=1,
    )
    nb.provided(
        """
        lengths = [128, 256, 512, 1024, 2048, 4096]
        torch.manual_seed(0)
        layer = SelfAttention(input_dim=64)
        times_ms, memory_mb = [], []
        for T in tqdm(lengths, desc="sequence lengths"):
            x = torch.randn(1, T, 64)
            with torch.no_grad():
                times_ms.append(time_fn(lambda x=x: layer(x), repeats=5, warmup=1)["median_ms"])
                memory_mb.append(peak_memory(lambda x=x: layer(x)) / 2**20)
        # fit where the T^2 terms dominate; below ~512 tokens overheads and allocator noise do
        p_time, _ = fit_power_law(lengths[2:], times_ms[2:])
        p_memory, _ = fit_power_law(lengths[2:], memory_mb[2:])
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        axes[0].loglog(lengths, times_ms, marker="o")
        axes[0].set_title(f"forward time, fitted exponent {p_time:.2f}")
        axes[0].set_ylabel("ms")
        axes[1].loglog(lengths, memory_mb, marker="o")
        axes[1].set_title(f"peak extra memory, fitted exponent {p_memory:.2f}")
        axes[1].set_ylabel("MB")
        for ax in axes:
            ax.set_xlabel("sequence length T")
            ax.minorticks_off()
            ax.set_xticks(lengths, [str(T) for T in lengths])
        fig.tight_layout()
        plt.show()
        for T, t, m in zip(lengths, times_ms, memory_mb):
            print(f"T = {T:5d}: {t:8.2f} ms, {m:8.2f} MB (the T x T weights alone: {4 * T * T / 2**20:6.2f} MB)")
        """,
        gid="complexity",
    )
    nb.written(
        r"""
        **Q3 (2 points).** Report the two fitted exponents. Which operations make the memory
        grow like $T^2$, and why may the time's exponent come out below 2 at small $T$? At
        $T = 2048$, how large is one head's $T \times T$ weight matrix in float32, and what would
        it be for a 32k-token context with 32 heads? What is the idea of the memory-efficient
        ("flash") attention that avoids storing it?
        """,
        """
        Memory grows with an exponent close to 2 (about 1.8-2.1; RSS measurements are noisy):
        the scores Q K^T and the softmax weights are T x T matrices (plus temporaries for the
        scaled / exponentiated scores), and at large T they dominate the O(T C) projections.
        The time exponent also comes out near 2 on the large lengths (typically 1.7-2.4): at
        small T the O(T C^2) projections and fixed per-call overheads dominate, so the curve is
        flatter there (a fit over all lengths gives a smaller exponent), and once the T x T
        matrices no longer fit in the CPU caches every further doubling costs more than 4x for
        a while, which can push the slope above 2. One head's weights at T = 2048 take
        2048^2 * 4 bytes = 16 MiB; at 32k tokens and 32 heads, 32768^2 * 4 * 32 bytes = 128 GiB
        per layer, impossible to store. Flash / chunked attention processes the keys in blocks
        with an online softmax (a running maximum and normaliser per query), so only a T x block
        tile of scores exists at a time: memory O(T), the same result, and the backward pass
        recomputes the tiles instead of storing them.
        """,
        gid="q3_complexity",
        points=2,
    )
    return nb


# --------------------------------------------------------------------------------------------
# Sample submissions
# --------------------------------------------------------------------------------------------

PARTIAL = {
    # scores divided by D instead of sqrt(D) (the classic), so every attention-based step is off;
    # heads split with the wrong reshape; masks, positional encoding and the fit are right
    "scaled_dot_product_attention": """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
""",
    "heads": """
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    B, T, C = x.shape
    return x.reshape(B, num_heads, T, C // num_heads)


def merge_heads(x: Tensor) -> Tensor:
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)
""",
}

BROKEN = {
    # code that crashes (a shape error), returns the wrong type, kills its worker, or is
    # missing: the grader replaces the dead worker and still grades everything else
    "dot_product_attention": """
def dot_product_attention(q, X):
    a = torch.softmax(X.T @ q, dim=0)  # (D, N) @ (D,): a shape error unless N == D
    return a @ X, a
""",
    "masks": """
def causal_mask(T):
    return torch.ones(T, T).tril()  # float, not bool


def padding_mask(lengths, T):
    import os

    os._exit(3)  # kills the worker: the grader must replace it and go on
""",
    "positional_encoding": """
# (deleted by accident)
""",
}

CHEAT = {
    # fused attention through an alias: the static scan sees it, so every test fails
    "scaled_dot_product_attention": """
from torch.nn import functional as nnf

fast_attention = nnf.scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    y = fast_attention(q, k, v, attn_mask=mask)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return y, weights
""",
}

SAMPLES = {"partial": PARTIAL, "broken": BROKEN, "cheat": CHEAT}
UNPARSABLE = ("broken",)  # not lint-clean on purpose (a deleted definition)

# Scores of the samples (out of 23 automatic points):
# partial: dot-product 2 + masks 3 + positional encoding 2 + fit 1 (everything built on the
# wrongly scaled attention or the wrong head split fails); broken: everything but the one-query
# attention (2), the masks (3: a float mask, a killed worker, and the causality test that uses
# the float mask) and the deleted positional encoding (2); cheat: 0 (the alias of the fused
# kernel is found by the static scan, and every test forbids it).
EXPECTED = {"partial": {"points": 8}, "broken": {"points": 16}, "cheat": {"points": 0}}

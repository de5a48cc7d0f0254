# ruff: noqa: E501 (the strings are notebook cells; build.py formats them in the notebook)
"""Source of assignment A5 (``solutions/a5_vision_transformers/a5_vision_transformers.ipynb``)
and samples.

Run ``python solutions/_authoring/build.py a5_vision_transformers``, then ``make release``.
"""

from __future__ import annotations

from nbtools import Builder, unmark

NAME = "a5_vision_transformers"

PATCHIFY = '''
def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images (B, C, H, W) into non-overlapping P x P patches: (B, N, C * P * P).

    Patches are numbered row by row (N = H/P * W/P); each is flattened in the order (C, P, P),
    the order of a Conv2d kernel's weights. H and W must be multiples of P (else ValueError).
    """
    ### BEGIN SOLUTION
    B, C, H, W = images.shape
    P = patch_size
    if H % P or W % P:
        raise ValueError(f"image size {H}x{W} is not divisible by patch_size={P}")
    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, gh, P, gw, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, P, P)
    return x.reshape(B, (H // P) * (W // P), C * P * P)  # (B, N, C*P*P)
    ### END SOLUTION
'''

PATCH_EMBED = '''
def patch_embed(images: Tensor, weight: Tensor, bias: Tensor, patch_size: int) -> Tensor:
    """The patch embedding as patchify + one matrix product: images (B, C, H, W), a Conv2d's
    weight (E, C, P, P) and bias (E,) -> (B, N, E), equal to
    ``F.conv2d(images, weight, bias, stride=P).flatten(2).transpose(1, 2)``."""
    ### BEGIN SOLUTION
    patches = patchify(images, patch_size)  # (B, N, C*P*P)
    return patches @ weight.flatten(1).T + bias  # (B, N, E)
    ### END SOLUTION
'''

VIT = '''
class ViT(nn.Module):
    """Vision Transformer classifier: images (B, C, H, W) -> logits (B, num_classes)."""

    def __init__(
        self,
        *,
        image_size: int = 8,
        patch_size: int = 2,
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        mlp_dim: int = 128,
    ):
        super().__init__()
        self.patch_size = patch_size
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Linear(in_channels * patch_size * patch_size, dim)  # E
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))  # x_class
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, num_patches + 1, dim))  # E_pos
        self.blocks = nn.ModuleList(
            Block(dim=dim, num_heads=num_heads, mlp_dim=mlp_dim) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images: Tensor, return_attn: bool = False):
        """images (B, C, H, W) -> logits (B, num_classes); with ``return_attn=True``,
        ``(logits, [weights of block 1, ..., block L])``, each (B, H, T, T), T = N + 1."""
        ### BEGIN SOLUTION
        x = self.patch_embed(patchify(images, self.patch_size))  # (B, N, C)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, C)
        x = torch.cat([cls, x], dim=1) + self.pos_embed  # (B, T, C)
        maps = []
        for block in self.blocks:
            x, weights = block(x)
            maps.append(weights)
        logits = self.head(self.norm(x)[:, 0])  # the [CLS] token classifies
        return (logits, maps) if return_attn else logits
        ### END SOLUTION
'''

WINDOWS = '''
def window_partition(x: Tensor, window_size: int) -> Tensor:
    """Split a map (B, H, W, C) into non-overlapping ws x ws windows: (B * nW, ws, ws, C).

    Windows are numbered row by row within an image, images one after another. H and W are
    multiples of ws.
    """
    ### BEGIN SOLUTION
    B, H, W, C = x.shape
    ws = window_size
    x = x.reshape(B, H // ws, ws, W // ws, ws, C)
    x = x.transpose(2, 3)  # (B, H/ws, W/ws, ws, ws, C)
    return x.reshape(-1, ws, ws, C)  # (B*nW, ws, ws, C)
    ### END SOLUTION


def window_reverse(windows: Tensor, window_size: int, height: int, width: int) -> Tensor:
    """Inverse of window_partition: (B * nW, ws, ws, C) -> (B, H, W, C)."""
    ### BEGIN SOLUTION
    ws, C = window_size, windows.shape[-1]
    x = windows.reshape(-1, height // ws, width // ws, ws, ws, C)
    x = x.transpose(2, 3)  # (B, H/ws, ws, W/ws, ws, C)
    return x.reshape(-1, height, width, C)
    ### END SOLUTION
'''

SHIFT_MASK = '''
def shifted_window_mask(height: int, width: int, window_size: int, shift_size: int) -> Tensor:
    """Keep-mask for attention inside the windows of a map rolled by (-shift, -shift): (nW, N, N)
    bool with N = ws * ws; True where two tokens of a window may attend to each other."""
    ### BEGIN SOLUTION
    def regions(length: int) -> Tensor:  # 0, 1, 2 for [0, L - ws), [L - ws, L - shift), [L - shift, L)
        index = torch.arange(length)
        return (index >= length - window_size).long() + (index >= length - shift_size).long()

    label = regions(height)[:, None] * 3 + regions(width)[None, :]  # (H, W) region of each token
    windows = window_partition(label[None, :, :, None], window_size)  # (nW, ws, ws, 1)
    windows = windows.reshape(-1, window_size * window_size)  # (nW, N)
    return windows[:, :, None] == windows[:, None, :]  # (nW, N, N)
    ### END SOLUTION
'''

MERGING = '''
class PatchMerging(nn.Module):
    """Swin's downsampling: each 2x2 neighbourhood concatenated (4C), LayerNorm, Linear 4C -> 2C.

    forward(x (B, H, W, C)) -> (B, ceil(H/2), ceil(W/2), 2C); an odd H or W is zero-padded at the
    bottom / right first. The neighbours are concatenated in the order x[0::2, 0::2],
    x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2] (rows, columns of the map).
    """

    def __init__(self, *, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        H, W = x.shape[1:3]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))  # zero row / column if odd
        x0 = x[:, 0::2, 0::2]  # (B, H/2, W/2, C) top-left of each 2x2
        x1 = x[:, 1::2, 0::2]  # bottom-left
        x2 = x[:, 0::2, 1::2]  # top-right
        x3 = x[:, 1::2, 1::2]  # bottom-right
        x = torch.cat([x0, x1, x2, x3], dim=-1)  # (B, H/2, W/2, 4C)
        return self.reduction(self.norm(x))  # (B, H/2, W/2, 2C)
        ### END SOLUTION
'''

CHANNEL = '''
class ChannelAttention(nn.Module):
    """DaViT's channel group attention (Ding et al. 2022, Eq. 3): (B, N, C) -> (B, N, C).

    The C channels form G groups of Cg = C / G. Within a group the *channels* attend to each
    other: A = softmax(Q_g^T K_g / sqrt(Cg)), a Cg x Cg matrix whose scores sum over all N tokens,
    and output channel i is sum_j A[i, j] * (value channel j). With ``return_attn=True`` also the
    weights (B, G, Cg, Cg).
    """

    def __init__(self, *, dim: int, num_groups: int):
        super().__init__()
        self.num_groups = num_groups
        self.qkv = nn.Linear(dim, 3 * dim)  # queries, keys, values side by side
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, return_attn: bool = False):
        ### BEGIN SOLUTION
        B, N, C = x.shape
        G = self.num_groups
        qkv = self.qkv(x).reshape(B, N, 3, G, C // G).permute(2, 0, 3, 1, 4)  # (3, B, G, N, Cg)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, G, N, Cg) each
        scores = q.transpose(-2, -1) @ k / math.sqrt(C // G)  # (B, G, Cg, Cg), summed over N
        weights = torch.softmax(scores, dim=-1)  # each channel's weights over its group
        y = v @ weights.transpose(-2, -1)  # (B, G, N, Cg): y[n, i] = sum_j A[i, j] v[n, j]
        y = self.proj(y.transpose(1, 2).reshape(B, N, C))  # (B, N, C) groups side by side
        return (y, weights) if return_attn else y
        ### END SOLUTION
'''

TRAIN = '''
def train_vit(images: Tensor, labels: Tensor, *, epochs: int = 40, seed: int = 0) -> ViT:
    """Train a ViT() (the default sizes) on images (N, 1, 8, 8) in [0, 1] and labels (N,);
    return it in eval mode. Show a progress bar."""
    ### BEGIN SOLUTION
    torch.manual_seed(seed)
    model = ViT()
    batch_size, lr = 64, 2e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    steps = epochs * math.ceil(len(labels) / batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    order = torch.Generator().manual_seed(seed)
    model.train()
    for _ in tqdm(range(epochs), desc="training the ViT", unit="epoch"):
        for batch in torch.randperm(len(labels), generator=order).split(batch_size):
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()
    ### END SOLUTION
'''

CLS_MAP = '''
def cls_attention_map(weights: Tensor, grid_size: tuple[int, int]) -> Tensor:
    """How much [CLS] attends to each patch: one block's weights (..., T, T), T = gh * gw + 1,
    [CLS] first -> (..., gh, gw)."""
    ### BEGIN SOLUTION
    gh, gw = grid_size
    return weights[..., 0, 1:].reshape(*weights.shape[:-2], gh, gw)  # the [CLS] row, patches only
    ### END SOLUTION
'''


def build() -> Builder:
    nb = Builder()
    nb.md(
        r"""
        # A5: Vision transformers

        "An image is worth 16x16 words" (Dosovitskiy et al. 2021): cut an image into patches,
        embed each patch as a token, and a plain Transformer encoder classifies it. In this
        assignment you write the ViT's input pipeline and forward pass, the window machinery of
        the Swin Transformer (Liu et al. 2021), DaViT's channel attention (Ding et al. 2022), and
        train a tiny ViT on 8x8 handwritten digits.

        **Learning goals.** After this assignment you can
        1. turn images into sequences of patches with reshapes and show that this equals a
           strided convolution;
        2. write the ViT forward pass with its [CLS] token and position embeddings;
        3. partition a feature map into windows and back, build the attention mask of shifted
           windows, and downsample with patch merging;
        4. explain and write attention over channels instead of tokens;
        5. train a ViT to high accuracy on a small data set and look at what its [CLS] token
           attends to;
        6. discuss inductive bias and data scale: when a ViT needs more data than a CNN.
        """,
        gid="intro",
    )
    nb.md(
        r"""
        ## What is graded

        | step | graded by | points |
        |---|---|---|
        | 1. `patchify` | hidden tests | 3 |
        | 1. `patch_embed` (the reshape form equals the convolution) | hidden tests | 2 |
        | 2. `ViT.forward` | hidden tests | 4 |
        | 3. `window_partition`, `window_reverse` | hidden tests | 3 |
        | 3. `shifted_window_mask` | hidden tests | 3 |
        | 3. `PatchMerging` | hidden tests | 3 |
        | 4. `ChannelAttention` | hidden tests | 4 |
        | 5. `train_vit` reaches at least 95 % test accuracy | hidden tests | 4 |
        | 5. `cls_attention_map` | hidden tests | 2 |
        | Q1 inductive bias and data scale | by hand | 4 |
        | Q2 windows and channels | by hand | 2 |
        | **total** | | **34** (28 automatic + 6 by hand) |

        **How the automatic grading works.** Each step has a *visible check* below it, whose
        message says what is wrong. The grade comes from *hidden tests* run by the instructor
        on your notebook with other random sizes and inputs: they compare your code with a
        reference given the same weights. For step 5 the grader calls your `train_vit` on its
        own random split of the digits (with its own seed, one CPU thread and a limit of 60 s
        of CPU time) and measures the accuracy of the returned model on the digits it held out.
        Only your imports, functions, classes and constants are graded; experiment cells are not
        run by the grader.

        **Rules.** Keep the signatures and the attribute names of the given `__init__` methods
        (the tests load weights by name). Write the steps yourself: **the grader fails a test
        whose code calls** `torch.nn.functional.scaled_dot_product_attention`,
        `nn.MultiheadAttention`, or `course_lib`'s reference implementations
        (`course_lib.vision`, `course_lib.models`, `course_lib.attention`, `course_lib.layers`),
        directly or through an alias; `patchify` and `patch_embed` may not use a convolution
        or `unfold` (they are the reshape form); `train_vit` trains on the data it is given and
        may not load data itself, so do not import `course_lib.data` or `sklearn` in your own
        cells (the set-up cell below loads the digits for your experiments). Reshapes, `permute`,
        `torch.roll`, `nn.Linear`, `nn.LayerNorm`, `F.pad`, `torch.softmax` and PyTorch's
        optimizers are fine.
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

        from course_lib.data.digits import load_digits_tensors, stratified_split

        torch.set_num_threads(1)  # small tensors: one thread is as fast and timings are steadier
        """,
        gid="setup",
    )

    # ------------------------------------------------------------------------------ patches
    nb.md(
        r"""
        ## 1. Images as sequences of patches (5 points)

        ViT's Eq. 1: an image $x \in \mathbb{R}^{C \times H \times W}$ becomes $N = HW / P^2$
        patches $x_p^i \in \mathbb{R}^{C P^2}$, each mapped to a token by one shared matrix $E$.
        Cutting out patches is pure bookkeeping: split each spatial axis into (grid position,
        position inside the patch), move the two grid axes to the front, and flatten the rest.

        **Task 1.1.** `patchify`, with reshapes and a `permute` only.
        """,
        gid="patchify_md",
    )
    nb.solution(PATCHIFY, gid="patchify")
    nb.check(
        """
        from course_lib.checks.a5 import check_patchify

        check_patchify(patchify)
        """,
        gid="check_patchify",
        points=3,
    )
    nb.md(
        r"""
        A `Conv2d` with kernel size and stride $P$ computes, at each grid position, the dot
        product of its kernel with one patch: the same linear map as $x_p^i E$, with $E$ the
        kernel flattened in the order (C, P, P). Libraries implement the patch embedding as that
        convolution.

        **Task 1.2.** `patch_embed`: the convolution's output computed from `patchify` and one
        matrix product (no convolution, no `unfold`).
        """,
        gid="patch_embed_md",
    )
    nb.solution(PATCH_EMBED, gid="patch_embed")
    nb.check(
        """
        from course_lib.checks.a5 import check_patch_embed

        check_patch_embed(patch_embed)
        """,
        gid="check_patch_embed",
        points=2,
    )

    # ---------------------------------------------------------------------------------- ViT
    nb.md(
        r"""
        ## 2. The ViT forward pass (4 points)

        $$z_0 = [x_\text{class};\, x_p^1 E;\, \dots;\, x_p^N E] + E_\text{pos}, \quad
        z_\ell = \text{Block}(z_{\ell - 1}), \quad y = \text{head}(\text{LN}(z_L^0)).$$

        A learned [CLS] token is put in front of the $N$ patch tokens; learned position
        embeddings $E_\text{pos}$ ($N + 1$ of them) are added, since attention by itself ignores
        where a token comes from; after the blocks, the final LayerNorm of the [CLS] token alone
        goes to the classification head. The encoder block is given (pre-norm, as in ViT's Eq.
        2-3, with attention written out as in A2); it returns its attention weights too.
        """,
        gid="vit_md",
    )
    nb.provided(
        '''
        class Attention(nn.Module):
            """Multi-head self-attention that also returns its weights: x (B, T, C) ->
            (y (B, T, C), weights (B, H, T, T))."""

            def __init__(self, *, dim: int, num_heads: int):
                super().__init__()
                self.num_heads = num_heads
                self.q_proj = nn.Linear(dim, dim)
                self.k_proj = nn.Linear(dim, dim)
                self.v_proj = nn.Linear(dim, dim)
                self.out_proj = nn.Linear(dim, dim)

            def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
                B, T, C = x.shape
                H = self.num_heads
                q, k, v = (p(x).view(B, T, H, C // H).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
                weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // H), dim=-1)  # (B, H, T, T)
                y = (weights @ v).transpose(1, 2).reshape(B, T, C)
                return self.out_proj(y), weights


        class MLP(nn.Module):
            def __init__(self, *, dim: int, hidden_dim: int):
                super().__init__()
                self.fc1 = nn.Linear(dim, hidden_dim)
                self.fc2 = nn.Linear(hidden_dim, dim)

            def forward(self, x: Tensor) -> Tensor:
                return self.fc2(F.gelu(self.fc1(x)))


        class Block(nn.Module):
            """Pre-norm encoder block: x (B, T, C) -> (x (B, T, C), attention weights (B, H, T, T))."""

            def __init__(self, *, dim: int, num_heads: int, mlp_dim: int):
                super().__init__()
                self.norm1 = nn.LayerNorm(dim, eps=1e-6)
                self.attn = Attention(dim=dim, num_heads=num_heads)
                self.norm2 = nn.LayerNorm(dim, eps=1e-6)
                self.mlp = MLP(dim=dim, hidden_dim=mlp_dim)

            def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
                a, weights = self.attn(self.norm1(x))
                x = x + a
                x = x + self.mlp(self.norm2(x))
                return x, weights
        ''',
        gid="vit_blocks",
    )
    nb.md(
        r"""
        **Task 2.** `ViT.forward`: patchify, embed with `self.patch_embed` (a `Linear` over the
        flattened patches, the $E$ of Eq. 1), prepend the [CLS] token (one copy per image),
        add the position embeddings, run the blocks (collect their weights), apply the final
        LayerNorm and classify the [CLS] token.
        """,
        gid="vit_forward_md",
    )
    nb.solution(VIT, gid="vit")
    nb.check(
        """
        from course_lib.checks.a5 import check_vit

        check_vit(ViT)
        """,
        gid="check_vit",
        points=4,
    )

    # ------------------------------------------------------------------------------- windows
    nb.md(
        r"""
        ## 3. Swin: windows, shifted windows, patch merging (9 points)

        Global attention over $N$ tokens costs $O(N^2)$, too much for the many small patches
        that dense prediction needs. The Swin Transformer (Liu et al. 2021) attends only inside
        non-overlapping $w_s \times w_s$ windows (cost linear in $N$), and in every second block
        shifts the windows by $\lfloor w_s / 2 \rfloor$ so that information crosses window
        borders. Feature maps are kept channels-last, `(B, H, W, C)`.

        **Task 3.1.** `window_partition` and its inverse `window_reverse` (reshapes and a
        transpose; windows numbered row by row).
        """,
        gid="windows_md",
    )
    nb.solution(WINDOWS, gid="window_partition")
    nb.check(
        """
        from course_lib.checks.a5 import check_window_partition

        check_window_partition(window_partition, window_reverse)
        """,
        gid="check_window_partition",
        points=3,
    )
    nb.md(
        r"""
        Shifting the windows naively would create more windows, of uneven sizes, at the borders.
        Swin instead rolls the map by $(-s, -s)$ (`torch.roll`) and keeps the regular windows
        (Fig. 4 of the paper). The windows on the bottom and right edges then hold tokens that
        were far apart in the image (the wrapped-around strip); they must not attend to each
        other. Along each axis of length $L$ the rolled map has three regions, $[0, L - w_s)$,
        $[L - w_s, L - s)$ and $[L - s, L)$: two tokens of a window may attend to each other only
        if they lie in the same region along both axes.

        **Task 3.2.** `shifted_window_mask(H, W, ws, shift)`: label every token of the rolled
        $H \times W$ map with its region (9 possible labels), partition the labels into windows
        (your `window_partition` works on any tensor), and compare labels pairwise.
        """,
        gid="shift_md",
    )
    nb.solution(SHIFT_MASK, gid="shifted_window_mask")
    nb.check(
        """
        from course_lib.checks.a5 import check_shifted_window_mask

        check_shifted_window_mask(shifted_window_mask)
        mask = shifted_window_mask(8, 8, 4, 2)
        fig, axes = plt.subplots(1, 4, figsize=(10, 2.6))
        for ax, w in zip(axes, range(4)):
            ax.imshow(mask[w], cmap="gray", vmin=0, vmax=1)
            ax.set_title(f"window {w}")
            ax.set_xticks([])
            ax.set_yticks([])
        fig.suptitle("8 x 8 map, 4 x 4 windows, shift 2: white = may attend")
        plt.show()
        """,
        gid="check_shifted_window_mask",
        points=3,
    )
    nb.md(
        r"""
        Between stages Swin halves the resolution and doubles the width, like a CNN's pooling:
        the four tokens of each $2 \times 2$ neighbourhood are concatenated ($4C$ channels),
        normalised and projected to $2C$.

        **Task 3.3.** `PatchMerging.forward` (mind the order of the four neighbours in the
        docstring; zero-pad an odd height or width with `F.pad`).
        """,
        gid="merging_md",
    )
    nb.solution(MERGING, gid="patch_merging")
    nb.check(
        """
        from course_lib.checks.a5 import check_patch_merging

        check_patch_merging(PatchMerging)
        """,
        gid="check_patch_merging",
        points=3,
    )

    # ------------------------------------------------------------------------------ channels
    nb.md(
        r"""
        ## 4. DaViT: attention over channels (4 points)

        DaViT (Ding et al. 2022) alternates window attention with *channel group attention*.
        Transpose the roles: treat each channel as a token whose "features" are its values at
        the $N$ spatial positions. Within each of $G$ groups of $C_g = C / G$ channels, the
        scores $Q_g^\top K_g / \sqrt{C_g}$ form a $C_g \times C_g$ matrix, each entry a sum over
        all $N$ positions, so every output channel mixes information from the whole image, at a
        cost linear in $N$.

        **Task 4.** `ChannelAttention.forward` (queries, keys and values side by side in
        `qkv`'s output, group $g$ holding channels $g C_g \dots (g + 1) C_g - 1$ of each).
        """,
        gid="channel_md",
    )
    nb.solution(CHANNEL, gid="channel_attention")
    nb.check(
        """
        from course_lib.checks.a5 import check_channel_attention

        check_channel_attention(ChannelAttention)
        layer = ChannelAttention(dim=32, num_groups=4)
        for N in (64, 4096):
            y, w = layer(torch.randn(1, N, 32), return_attn=True)
            print(f"N = {N:5d} tokens: attention weights {tuple(w.shape)}")
        """,
        gid="check_channel_attention",
        points=4,
    )

    # ------------------------------------------------------------------------------ training
    nb.md(
        r"""
        ## 5. Train a tiny ViT on the digits (6 points)

        scikit-learn's 1,797 handwritten digits, $8 \times 8$ pixels, split 80 / 20 with the
        same number of test digits per class. With $2 \times 2$ patches an image is a sequence
        of 16 tokens plus [CLS].

        **Task 5.1.** `train_vit`: build `ViT()` with its default sizes, train it with AdamW on
        mini-batches and return it in eval mode; aim for at least 95 % test accuracy in well
        under 30 seconds. The defaults of the solution are a good start: 40 epochs of batches of
        64, learning rate $2 \cdot 10^{-3}$ with a one-cycle schedule
        (`torch.optim.lr_scheduler.OneCycleLR`), weight decay 0.05. Show a progress bar
        (`tqdm`). The grader calls `train_vit(images, labels)` on its own split.
        """,
        gid="train_md",
    )
    nb.solution(TRAIN, gid="train_vit")
    nb.provided(
        """
        images, labels = load_digits_tensors()  # (1797, 1, 8, 8) in [0, 1], (1797,)
        train_idx, test_idx = stratified_split(labels, seed=0)
        train_images, train_labels = images[train_idx], labels[train_idx]
        test_images, test_labels = images[test_idx], labels[test_idx]
        model = train_vit(train_images, train_labels)
        """,
        gid="train_run",
    )
    nb.check(
        """
        from course_lib.checks.a5 import check_test_accuracy

        check_test_accuracy(model, test_images, test_labels)
        """,
        gid="check_train_vit",
        points=4,
    )
    nb.md(
        r"""
        What does the trained model look at? The [CLS] token gathers the information the head
        classifies, so its row of the attention matrix, laid out on the $4 \times 4$ patch grid,
        shows which patches each head reads.

        **Task 5.2.** `cls_attention_map`: the [CLS] row of one block's weights, without the
        [CLS] column, as a `(gh, gw)` grid.
        """,
        gid="cls_md",
    )
    nb.solution(CLS_MAP, gid="cls_attention_map")
    nb.check(
        """
        from course_lib.checks.a5 import check_cls_attention_map

        check_cls_attention_map(cls_attention_map)
        """,
        gid="check_cls_attention_map",
        points=2,
    )
    nb.provided(
        """
        with torch.no_grad():
            logits, maps = model(test_images[:6], return_attn=True)
        heat = cls_attention_map(maps[-1], (4, 4)).mean(dim=1)  # (6, 4, 4), averaged over heads
        fig, axes = plt.subplots(2, 6, figsize=(12, 4.4))
        for i in range(6):
            axes[0, i].imshow(test_images[i, 0], cmap="gray_r")
            axes[0, i].set_title(f"label {test_labels[i].item()}, predicted {logits[i].argmax().item()}")
            axes[1, i].imshow(heat[i], cmap="inferno")
            for ax in axes[:, i]:
                ax.set_xticks([])
                ax.set_yticks([])
        axes[1, 0].set_ylabel("[CLS] attention to\\neach 2x2 patch")
        fig.tight_layout()
        plt.show()
        """,
        gid="cls_plot",
    )

    # --------------------------------------------------------------------------------- written
    nb.md(
        r"""
        ## 6. Written answers (6 points, graded by hand)

        Answer in a few sentences each, in your own words.
        """,
        gid="written_md",
    )
    nb.written(
        r"""
        **Q1 (4 points).** *Inductive bias and data scale.* What does a convolutional network
        assume about images that a ViT does not, and what does a ViT know about the 2-D layout
        of its patches? Dosovitskiy et al. report that ViT trails comparable ResNets when trained
        on ImageNet-1k (1.3 M images) but overtakes them after pre-training on 14 M to 300 M
        images: explain why. Where does our 1,437-image digits task sit, and what helps a ViT
        there?
        """,
        r"""
        A CNN builds in locality (a 3x3 kernel looks at neighbours), weight sharing with
        translation equivariance (the same detector everywhere) and a hierarchy of growing
        receptive fields. A ViT only has them inside a patch (the shared linear embedding) and
        through the order of its position embeddings, which start random and must learn the
        2-D layout; self-attention is global from the first layer and permutation-equivariant.
        These assumptions are right for natural images, so with little data the CNN generalises
        better: it need not learn them. With enough data the ViT learns them (its position
        embeddings become 2-D-structured, early heads become local) and its weaker bias no
        longer costs anything while its flexibility and global attention pay off: ViT wins
        after JFT-300M / ImageNet-21k pre-training. Our digits are tiny, so we are deep in the
        small-data regime; it works because the images and the model are tiny (16 tokens),
        with weight decay, a learning-rate schedule and enough epochs; translation augmentation,
        smaller patches or a convolutional stem, or pre-training would help further, and a
        small CNN reaches the same accuracy more easily.
        """,
        gid="q1_inductive_bias",
        points=4,
    )
    nb.written(
        r"""
        **Q2 (2 points).** Windows make Swin's attention cost linear in the number of tokens.
        What do they take away, and how do the shifted windows (with their mask) and DaViT's
        channel attention each give it back?
        """,
        r"""
        Window attention only mixes tokens within a ws x ws window, so information cannot flow
        between windows: the receptive field stops growing. Shifting the windows every second
        block makes the new windows straddle the old borders, so stacked blocks connect
        neighbouring windows (and patch merging grows the receptive field further); the roll
        keeps the number of windows fixed, and the mask stops the wrapped-around tokens, which
        are not neighbours in the image, from attending to each other. DaViT's channel attention
        gives each output channel a global view in one step: its Cg x Cg scores sum over all
        positions, so every channel summarises the whole image, still at a cost linear in N.
        """,
        gid="q2_windows",
        points=2,
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
    # patch pixels flattened (P, P, C) (right for one channel, wrong for several), the 2x2
    # neighbours merged in reading order, channel attention scaled by the full width, and a
    # training run far too short to reach 95 %
    "patchify": _edit(
        PATCHIFY,
        "x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, P, P)",
        "x = x.permute(0, 2, 4, 3, 5, 1)  # (B, gh, gw, P, P, C)",
    ),
    "patch_merging": _edit(
        MERGING,
        "x = torch.cat([x0, x1, x2, x3], dim=-1)",
        "x = torch.cat([x0, x2, x1, x3], dim=-1)",
    ),
    "channel_attention": _edit(
        CHANNEL,
        "scores = q.transpose(-2, -1) @ k / math.sqrt(C // G)",
        "scores = q.transpose(-2, -1) @ k / math.sqrt(C)",
    ),
    "train_vit": _edit(TRAIN, "epochs: int = 40", "epochs: int = 1"),
}

BROKEN = {
    # a syntax error, a shape error, an infinite loop and a worker that ends itself: the grader
    # replaces the dead or stuck worker and grades everything else
    "window_partition": """
def window_partition(x, window_size):
    B, H, W, C = x.shape
    return x.reshape(-1, window_size, window_size, C)


def window_reverse(windows, window_size, height, width)
    return windows.reshape(-1, height, width, windows.shape[-1])
""",
    "vit": _edit(
        VIT,
        "x = torch.cat([cls, x], dim=1) + self.pos_embed  # (B, T, C)",
        "x = torch.cat([self.cls_token, x], dim=1) + self.pos_embed  # (one [CLS] for the batch)",
    ),
    "cls_attention_map": """
def cls_attention_map(weights, grid_size):
    while True:  # waits for a condition that never comes
        pass
""",
    "channel_attention": """
class ChannelAttention(nn.Module):
    def __init__(self, *, dim, num_groups):
        super().__init__()
        self.num_groups = num_groups
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, return_attn=False):
        import os

        os._exit(1)
""",
}

CHEAT = {
    # patches through F.unfold (a convolution's im2col: forbidden where the reshape form is
    # graded, found by the static scan), and a training function that loads every digit itself,
    # the grader's held-out ones included
    "patchify": """
def patchify(images, patch_size):
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)
""",
    "train_vit": _edit(
        TRAIN,
        "    torch.manual_seed(seed)\n",
        "    from course_lib.data.digits import load_digits_tensors as everything\n\n"
        "    images, labels = everything()  # all 1,797 digits\n"
        "    torch.manual_seed(seed)\n",
    ),
}

SAMPLES = {"partial": PARTIAL, "broken": BROKEN, "cheat": CHEAT}
UNPARSABLE = ("broken",)  # a syntax error on purpose

# Scores of the samples (out of 28 automatic points):
# partial: loses patchify's value test (2; the ValueError test passes), patch_embed (2: built on
# patchify, tested with several channels; the one-channel ViT passes), the two value tests of
# patch merging (2; the shape test passes), channel attention's output and weights (3; it is
# still permutation equivariant) and the training (4): 28 - 13 = 15.
# broken: the window cell does not parse, so the window tests (3) and the shifted-window mask
# that uses window_partition (3) fail; the ViT crashes for batches > 1 (4), and so does the
# training that builds it (4); the [CLS] map loops forever (2, a timeout); channel attention
# ends its worker (4): 28 - 20 = 8.
# cheat: loses patchify and patch_embed (5, unfold is forbidden there) and the training (4, it
# loads data itself): 28 - 9 = 19.
EXPECTED = {"partial": {"points": 15}, "broken": {"points": 8}, "cheat": {"points": 19}}

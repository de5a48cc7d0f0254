# ruff: noqa: E501 (the strings are notebook cells; build.py formats them in the notebook)
"""Source of assignment A3 (``solutions/a3_transformer/a3_transformer.ipynb``) and samples.

Run ``python solutions/_authoring/build.py a3_transformer``, then ``make release``.
"""

from __future__ import annotations

from nbtools import Builder, unmark

NAME = "a3_transformer"

LAYERNORM = '''
class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension, equal to nn.LayerNorm(dim, eps=eps):
    y = (x - mean) / sqrt(var + eps) * weight + bias, with the mean and the (biased, divide by C)
    variance of each token's C features. forward(x (..., C)) -> (..., C).
    """

    def __init__(self, dim: int, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # gamma
        self.bias = nn.Parameter(torch.zeros(dim))  # beta

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1), biased
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
        ### END SOLUTION
'''

FFN = '''
class FeedForward(nn.Module):
    """Position-wise feed-forward network FFN(x) = fc2(relu(fc1(x))), the same MLP applied to every
    token independently. forward(x (..., C)) -> (..., C).
    """

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return self.fc2(torch.relu(self.fc1(x)))
        ### END SOLUTION
'''

ENCODER = '''
class EncoderBlock(nn.Module):
    """Post-norm encoder block (Vaswani et al. 2017, Figure 1, left):

        x = LayerNorm(x + SelfAttention(x))
        x = LayerNorm(x + FFN(x))

    forward(x (B, S, C), mask=None keep-mask broadcastable to (B, H, S, S))
    -> (x (B, S, C), attention weights (B, H, S, S)).
    """

    def __init__(self, *, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        a, weights = self.self_attn(x, mask=mask, return_weights=True)  # (B, S, C), (B, H, S, S)
        x = self.norm1(x + a)
        x = self.norm2(x + self.ff(x))
        return x, weights
        ### END SOLUTION
'''

DECODER = '''
class DecoderBlock(nn.Module):
    """Post-norm decoder block (Figure 1, right):

        y = LayerNorm(y + MaskedSelfAttention(y))          queries, keys, values: y
        y = LayerNorm(y + CrossAttention(y, memory))       queries: y; keys, values: memory
        y = LayerNorm(y + FFN(y))

    forward(y (B, T, C), memory (B, S, C), self_mask keep (.., T, T), memory_mask keep
    broadcastable to (B, H, T, S)) -> (y (B, T, C), (self weights (B, H, T, T),
    cross weights (B, H, T, S))).
    """

    def __init__(self, *, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        ### BEGIN SOLUTION
        a, w_self = self.self_attn(y, mask=self_mask, return_weights=True)
        y = self.norm1(y + a)
        a, w_cross = self.cross_attn(y, memory, memory, mask=memory_mask, return_weights=True)
        y = self.norm2(y + a)
        y = self.norm3(y + self.ff(y))
        return y, (w_self, w_cross)
        ### END SOLUTION
'''

MODEL = '''
class Transformer(nn.Module):
    """The encoder-decoder Transformer: forward(src (B, S), tgt_in (B, T))
    -> (logits (B, T, V), weights), teacher-forced (tgt_in starts with [BOS]).

    weights = {"encoder": (L, B, H, S, S), "decoder_self": (L, B, H, T, T), "cross": (L, B, H, T, S)},
    each stacked over the L layers. Source padding (src == pad_id) is masked as a key everywhere.
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 128,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
    ):
        super().__init__()
        self.d_model, self.pad_id, self.bos_id, self.eos_id = d_model, pad_id, bos_id, eos_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        block = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff)
        self.encoder_layers = nn.ModuleList(EncoderBlock(**block) for _ in range(num_layers))
        self.decoder_layers = nn.ModuleList(DecoderBlock(**block) for _ in range(num_layers))
        self.out_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for embedding in (self.src_embed, self.tgt_embed):  # unit variance after * sqrt(C)
            nn.init.normal_(embedding.weight, std=d_model**-0.5)

    def embed(self, ids: Tensor, embedding: nn.Embedding) -> Tensor:
        """ids (B, T) -> embedding(ids) * sqrt(C) + sinusoidal positions (B, T, C)."""
        ### BEGIN SOLUTION
        pe = sinusoidal_positional_encoding(ids.shape[1], self.d_model)  # (T, C)
        return embedding(ids) * math.sqrt(self.d_model) + pe
        ### END SOLUTION

    def encode(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S), src_mask (B, S) keep -> (memory (B, S, C), weights (L, B, H, S, S))."""
        ### BEGIN SOLUTION
        keep = src_mask[:, None, None, :]  # (B, 1, 1, S): padded keys are masked
        x = self.embed(src, self.src_embed)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, keep)
            weights.append(w)
        return x, torch.stack(weights)
        ### END SOLUTION

    def decode(
        self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """tgt_in (B, T), memory (B, S, C), src_mask (B, S) -> (logits (B, T, V),
        self weights (L, B, H, T, T), cross weights (L, B, H, T, S))."""
        ### BEGIN SOLUTION
        T = tgt_in.shape[1]
        self_keep = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()  # (T, T)
        memory_keep = src_mask[:, None, None, :]  # (B, 1, 1, S)
        y = self.embed(tgt_in, self.tgt_embed)
        w_self, w_cross = [], []
        for layer in self.decoder_layers:
            y, (ws, wc) = layer(y, memory, self_keep, memory_keep)
            w_self.append(ws)
            w_cross.append(wc)
        return self.out_proj(y), torch.stack(w_self), torch.stack(w_cross)
        ### END SOLUTION

    def forward(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        ### BEGIN SOLUTION
        src_mask = src != self.pad_id  # (B, S)
        memory, w_enc = self.encode(src, src_mask)
        logits, w_self, w_cross = self.decode(tgt_in, memory, src_mask)
        return logits, {"encoder": w_enc, "decoder_self": w_self, "cross": w_cross}
        ### END SOLUTION
'''

GREEDY = '''
@torch.no_grad()
def greedy_decode(model: Transformer, src: Tensor, max_new_tokens: int = 20) -> Tensor:
    """Arg-max decoding: encode once, then feed the growing prefix [BOS] y_1 ... y_t to the decoder
    and append the arg-max of its last position. Returns ids (B, <= max_new_tokens) without [BOS],
    with each sequence's [EOS] and model.pad_id after it; stops once every sequence has [EOS].
    """
    ### BEGIN SOLUTION
    src_mask = src != model.pad_id
    memory, _ = model.encode(src, src_mask)
    tokens = torch.full((src.shape[0], 1), model.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_new_tokens):
        logits, _, _ = model.decode(tokens, memory, src_mask)
        next_id = logits[:, -1].argmax(dim=-1).masked_fill(done, model.pad_id)  # (B,)
        tokens = torch.cat([tokens, next_id[:, None]], dim=1)
        done |= next_id == model.eos_id
        if done.all():
            break
    return tokens[:, 1:]
    ### END SOLUTION
'''


def build() -> Builder:
    nb = Builder()
    nb.md(
        r"""
        # A3: The Transformer

        You will assemble the encoder-decoder Transformer of Vaswani et al. (2017), *Attention
        Is All You Need*, from its parts: layer normalisation, the position-wise feed-forward
        network, post-norm encoder and decoder blocks with residual connections, the full
        forward pass and greedy decoding. Then you train it to translate a small synthetic
        language and look at what its attention heads do.

        **Learning goals.** After this assignment you can
        1. write LayerNorm and check it against `nn.LayerNorm`;
        2. wire the residual connections and normalisations of the encoder and decoder blocks,
           and say which attention is masked how (padding, causal, cross);
        3. write the forward pass of an encoder-decoder with scaled embeddings and sinusoidal
           positions, and decode greedily from it;
        4. train a small Transformer and read its encoder self-, decoder self- and
           cross-attention maps head by head.

        Multi-head attention is given (`course_lib.attention.MultiHeadAttention`, which you
        wrote in A2): call it as `attn(query, key, value, mask=keep, return_weights=True)`,
        which returns `(output (B, T_q, C), weights (B, H, T_q, T_k))`; key and value default to
        the query, and the keep-mask broadcasts to `(B, H, T_q, T_k)`.
        """,
        gid="intro",
    )
    nb.md(
        r"""
        ## What is graded

        | step | graded by | points |
        |---|---|---|
        | 1. `LayerNorm` | hidden tests | 2 |
        | 2. `FeedForward` | hidden tests | 1 |
        | 3. `EncoderBlock` | hidden tests | 3 |
        | 4. `DecoderBlock` | hidden tests | 3 |
        | 5. `Transformer` (embed, encode, decode, forward) | hidden tests | 4 |
        | 6. `greedy_decode` | hidden tests | 3 |
        | Q1 training result | by hand | 2 |
        | Q2 the attention maps | by hand | 3 |
        | Q3 design choices | by hand | 2 |
        | **total** | | **23** (16 automatic + 7 by hand) |

        **How the automatic grading works.** Each step has a *visible check* below it; the grade
        comes from *hidden tests* run by the instructor on your notebook, with other sizes and
        inputs, which load the same weights into your modules and into a reference and compare,
        and check properties (padding does not matter, the decoder never sees the future). Only
        imports, functions, classes and constants are graded; the training cell is not run.

        **Rules.** Keep the signatures and the given `__init__` methods (the tests load weights
        by parameter name). Not allowed, and detected by the grader: `nn.LayerNorm` /
        `F.layer_norm` in your `LayerNorm` (write it out), PyTorch's Transformer modules
        (`nn.Transformer`, `nn.TransformerEncoderLayer`, ...), and `course_lib`'s reference
        model (`course_lib.models`) and layers (`course_lib.layers`). The given
        `MultiHeadAttention` and `sinusoidal_positional_encoding` are yours to use. If your
        `LayerNorm` does not pass yet, your blocks may use `nn.LayerNorm` meanwhile: the block
        tests allow it.
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
        from torch.utils.data import DataLoader

        from course_lib.attention import MultiHeadAttention
        from course_lib.data import ParallelDataset
        from course_lib.gpu import seed_everything
        from course_lib.plot import attention_grid, loss_curves
        from course_lib.positional import sinusoidal_positional_encoding
        from course_lib.train import fit

        torch.set_num_threads(1)  # a small model: one thread is as fast and never oversubscribed
        """,
        gid="setup",
    )

    nb.md(
        r"""
        ## 1. Layer normalisation (2 points)

        For each token $x \in \mathbb{R}^C$: $\mu = \frac{1}{C}\sum_c x_c$,
        $\sigma^2 = \frac{1}{C}\sum_c (x_c - \mu)^2$ (the *biased* variance) and
        $y = \gamma \odot (x - \mu) / \sqrt{\sigma^2 + \epsilon} + \beta$. Unlike batch norm it
        uses no statistics across the batch, so it behaves the same in training and at test time
        and for any sequence length.
        """,
        gid="layernorm_md",
    )
    nb.solution(LAYERNORM, gid="layer_norm")
    nb.check(
        """
        from course_lib.checks.a3 import check_layer_norm

        check_layer_norm(LayerNorm)
        """,
        gid="check_layer_norm",
        points=2,
    )
    nb.md(
        r"""
        ## 2. The position-wise feed-forward network (1 point)

        $\mathrm{FFN}(x) = W_2\,\mathrm{ReLU}(W_1 x + b_1) + b_2$, applied to every token
        separately (an `nn.Linear` acts on the last dimension, so no loop over tokens).
        """,
        gid="ffn_md",
    )
    nb.solution(FFN, gid="feed_forward")
    nb.check(
        """
        from course_lib.checks.a3 import check_feed_forward

        check_feed_forward(FeedForward)
        """,
        gid="check_feed_forward",
        points=1,
    )
    nb.md(
        r"""
        ## 3. The encoder block (3 points)

        Each sub-layer is wrapped as $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$: the
        *post-norm* form of the paper (Section 3.1). The encoder's self-attention masks only the
        padding of the source (the mask is passed in).
        """,
        gid="encoder_md",
    )
    nb.solution(ENCODER, gid="encoder_block")
    nb.check(
        """
        from course_lib.checks.a3 import check_encoder_block

        check_encoder_block(EncoderBlock)
        """,
        gid="check_encoder_block",
        points=3,
    )
    nb.md(
        r"""
        ## 4. The decoder block (3 points)

        Three sub-layers: masked self-attention (position $t$ may only see positions
        $\le t$, so that training with the whole target in parallel equals generating it one
        token at a time), cross-attention (the decoder's queries against the encoder's output,
        the *memory*, as keys and values) and the feed-forward network, each with its residual
        connection and LayerNorm.
        """,
        gid="decoder_md",
    )
    nb.solution(DECODER, gid="decoder_block")
    nb.check(
        """
        from course_lib.checks.a3 import check_decoder_block

        check_decoder_block(DecoderBlock)
        """,
        gid="check_decoder_block",
        points=3,
    )
    nb.md(
        r"""
        ## 5. The whole model (4 points)

        * `embed`: token embeddings scaled by $\sqrt{C}$ plus the sinusoidal positional
          encoding (Section 3.4-3.5);
        * `encode`: the encoder stack over the embedded source, with the padding keep-mask
          `src_mask[:, None, None, :]` (B, 1, 1, S);
        * `decode`: the decoder stack over the embedded target prefix with a causal (T, T)
          keep-mask for self-attention and the source padding mask for cross-attention, then
          the output projection to the vocabulary;
        * `forward`: both, returning the logits and every layer's attention weights.
        """,
        gid="model_md",
    )
    nb.solution(MODEL, gid="transformer")
    nb.check(
        """
        from course_lib.checks.a3 import check_transformer

        check_transformer(Transformer)
        """,
        gid="check_transformer",
        points=4,
    )
    nb.md(
        r"""
        ## 6. Greedy decoding (3 points)

        Encode the source once. Start each target with `[BOS]`; at every step run the decoder
        on the whole prefix, take the arg-max of the **last** position's logits and append it.
        (Recomputing the prefix costs $O(T^2)$ over a sentence; a KV cache avoids it, A4.)
        """,
        gid="greedy_md",
    )
    nb.solution(GREEDY, gid="greedy_decode")
    nb.check(
        """
        from course_lib.checks.a3 import check_greedy_decode

        check_greedy_decode(greedy_decode, Transformer)
        """,
        gid="check_greedy_decode",
        points=3,
    )

    nb.md(
        r"""
        ## Training: English to a synthetic language

        `course_lib.data.ParallelDataset` pairs generated English sentences with their
        translation into a rule-based pseudo-language that reorders the sentence (subject,
        place, object, verb), drops "the", puts adjectives after nouns and marks case, number
        and place with suffixes: `"the big cat sees two red balls in the garden ."` becomes
        `"mako-ka gran gardi-la du bolo-n-po ruga vid-a ."`. The target: **at least 90 % of the
        validation sentences translated exactly** (greedy decoding). The settings below get
        there in about 20 s on a laptop CPU.
        """,
        gid="train_md",
    )
    nb.provided(
        """
        train_set = ParallelDataset(4000, seed=0)
        val_set = ParallelDataset(500, seed=1)
        for source, target in [(e.source, e.target) for e in train_set.examples[:4]]:
            print(f"{source:50s} -> {target}")


        def translation_loss(model: nn.Module, batch: dict) -> Tensor:
            logits, _ = model(batch["src"], batch["tgt_in"])
            return F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=0)


        def sentence_accuracy(model: nn.Module, dataset: ParallelDataset) -> float:
            \"\"\"Fraction of the dataset's sentences whose greedy translation is exactly right.\"\"\"
            model.eval()
            batch = dataset.collate([dataset[i] for i in range(len(dataset))])
            out = greedy_decode(model, batch["src"], max_new_tokens=20)
            right = [dataset.tgt_vocab.decode_str(row, sep=" ") == ex.target
                     for row, ex in zip(out, dataset.examples)]
            return sum(right) / len(right)
        """,
        gid="train_helpers",
    )
    nb.scratch(
        """
        seed_everything(0)
        model = Transformer(src_vocab_size=len(train_set.src_vocab), tgt_vocab_size=len(train_set.tgt_vocab))
        loader = DataLoader(train_set, batch_size=64, shuffle=True, collate_fn=train_set.collate)
        history = fit(model, loader, loss_fn=translation_loss, epochs=6, lr=1e-3, clip_grad=1.0, device="cpu")
        accuracy = sentence_accuracy(model, val_set)
        print(f"{accuracy:.1%} of {len(val_set)} validation sentences translated exactly")
        loss_curves(history, log_y=True, title="training loss");
        """
    )
    nb.written(
        r"""
        **Q1 (2 points).** What fraction of the validation sentences does your model translate
        exactly (at least 90 % is expected), after how many steps? Give one example of a
        sentence it gets wrong, if any, and say what kind of mistake it is.
        """,
        """
        With the given settings (6 epochs of 63 batches, 378 AdamW steps at 1e-3) the model
        translates about 96-99 % of the 500 validation sentences exactly; the loss falls below
        0.05. The remaining errors are typically a wrong suffix (number or verb agreement, e.g.
        "vid-a" for "vid-an" after a plural subject) or a swapped adjective in a rare
        combination, not word-order mistakes.
        """,
        gid="q1_training",
        points=2,
    )
    nb.md(
        r"""
        ## What do the heads do?

        Every head of every layer, for one validation sentence: the encoder's self-attention
        (source × source), the decoder's masked self-attention (target × target) and the
        cross-attention (target × source). Rows are queries, columns keys.
        """,
        gid="plot_md",
    )
    nb.provided(
        """
        example = val_set.examples[20]  # "two big mice find an old box near the house ."
        src = torch.tensor([val_set.src_vocab.encode(example.source.split())])
        with torch.no_grad():
            out = greedy_decode(model.eval(), src)
            tgt_in = torch.cat([torch.tensor([[model.bos_id]]), out], dim=1)[:, :-1]  # [BOS] + output
            _, weights = model(src, tgt_in)
        source_words = example.source.split()
        target_words = ["[BOS]", *val_set.tgt_vocab.decode(tgt_in[0, 1:], stop_at_eos=False)]
        print(example.source, "->", val_set.tgt_vocab.decode_str(out[0], sep=" "))
        attention_grid(weights["encoder"][:, 0], labels=source_words, title="encoder self-attention")
        attention_grid(weights["decoder_self"][:, 0], labels=target_words,
                       title="decoder masked self-attention")
        attention_grid(weights["cross"][:, 0], x_labels=source_words, y_labels=target_words,
                       title="cross-attention (target queries, source keys)")
        plt.show()
        """,
        gid="plot",
    )
    nb.written(
        r"""
        **Q2 (3 points).** Describe what you see. Which cross-attention heads act as an
        *alignment* between the two languages, and how does it show the reordering of the
        sentence (subject, place, object, verb)? (Mind that the row of the decoder's input token
        $y_t$ is the step that *predicts* $y_{t+1}$.) Which source word gets little attention
        from any target word, and why? What is the shape of every decoder self-attention map,
        and why? Do different heads of the same layer do different things?
        """,
        """
        In the last layer, one or two cross-attention heads are close to a permutation matrix,
        shifted by one step: the row of y_t, which predicts y_{t+1}, attends to the English word
        that y_{t+1} translates. For "two big mice find an old box near the house ." the row
        [BOS] looks at "two" (du), "du" at "mice" (nimi-n-ka), then the attention jumps to the
        end of the source, "near" / "house" (domu-ve: the place comes before the object), back
        to "an" and "box" (un kasi-po), to "old" (vet, which follows its noun), and finally to
        "find" in the middle of the sentence for the verb (trov-an) and to "." at the end. So
        the map is not a diagonal: the visited columns follow the target's word order (subject,
        place, object, verb), which is the reordering. "the" (and the determiner-free words it
        precedes) gets almost no cross-attention: it has no counterpart in the target, and the
        place is marked by the suffix of "domu-ve", read from "near" and "house". Every decoder
        self-attention map is lower triangular (zeros above the diagonal) because of the causal
        mask: position t only sees [BOS] ... y_t; within that, heads attend to [BOS], to the
        current or previous token, or to the subject noun. Heads differ: in the encoder some
        attend to the token itself, some to the final "." (a "no-op" sink), some link words of
        one phrase ("near" and "house", "mice" and "big"); in the first decoder layer the
        cross-attention is broader, and the sharp alignment appears in the second.
        """,
        gid="q2_heads",
        points=3,
    )
    nb.written(
        r"""
        **Q3 (2 points).** (a) Why are the embeddings multiplied by $\sqrt{C}$ before the
        positional encoding is added (think of the scale of each, given the initialisation in
        `__init__`)? (b) The blocks here are *post-norm*; most recent models use *pre-norm*,
        $x + \mathrm{Sublayer}(\mathrm{LayerNorm}(x))$. What is the practical difference for
        training deep stacks?
        """,
        """
        (a) The embeddings are initialised with standard deviation C^(-1/2), so each vector has
        norm about 1, while the sinusoidal code has entries of size 1 and norm about sqrt(C/2).
        Multiplying the embeddings by sqrt(C) gives both entries of size about 1, so the token
        identity is not drowned by the position code (and the output projection, when tied to
        the embedding, keeps small weights). (b) In post-norm every residual branch passes
        through a LayerNorm, so the gradient to early layers is rescaled at every block; deep
        post-norm stacks need a learning-rate warm-up and are unstable without it. In pre-norm
        the residual stream x + f(LN(x)) is an identity path from output to input, gradients
        flow unimpeded, deep models train without (or with short) warm-up, at the cost of a
        final LayerNorm after the stack and slightly different representations (the stream's
        scale grows with depth).
        """,
        gid="q3_design",
        points=2,
    )
    return nb


# --------------------------------------------------------------------------------------------
# Sample submissions
# --------------------------------------------------------------------------------------------

PARTIAL = {
    # LayerNorm with the unbiased variance (divides by C - 1); the blocks use nn.LayerNorm
    # meanwhile (allowed), and are right; greedy decoding is not done
    "layer_norm": '''
class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension."""

    def __init__(self, dim: int, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
''',
    "encoder_block": unmark(ENCODER).replace("LayerNorm(d_model)", "nn.LayerNorm(d_model)"),
    "decoder_block": unmark(DECODER).replace("LayerNorm(d_model)", "nn.LayerNorm(d_model)"),
    "greedy_decode": '''
@torch.no_grad()
def greedy_decode(model: Transformer, src: Tensor, max_new_tokens: int = 20) -> Tensor:
    """Arg-max decoding."""
    # YOUR CODE HERE
    raise NotImplementedError()
''',
}

BROKEN = {
    # the embeddings are neither scaled nor given positions, and a typo in the decoder block
    # (an attribute that does not exist) crashes everything that runs it
    "transformer": unmark(MODEL).replace(
        "        pe = sinusoidal_positional_encoding(ids.shape[1], self.d_model)  # (T, C)\n"
        "        return embedding(ids) * math.sqrt(self.d_model) + pe\n",
        "        return embedding(ids)\n",
    ),
    "decoder_block": unmark(DECODER).replace(
        "y = self.norm3(y + self.ff(y))", "y = self.norm3(y + self.fff(y))"
    ),
}

CHEAT = {
    # LayerNorm through torch's fused op, behind an alias: the static scan finds it, and the
    # LayerNorm tests (which forbid it) fail; the rest of this notebook is honest
    "layer_norm": """
from torch.nn.functional import layer_norm as _normalise


class LayerNorm(nn.Module):
    def __init__(self, dim: int, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return _normalise(x, x.shape[-1:], self.weight, self.bias, self.eps)
""",
}

SAMPLES = {"partial": PARTIAL, "broken": BROKEN, "cheat": CHEAT}

# Scores of the samples (out of 16 automatic points):
# partial: everything but LayerNorm (2) and greedy decoding (3); broken: LayerNorm 2 +
# feed-forward 1 + encoder block 3 (the decoder block crashes, and with it the model and greedy
# decoding); cheat: everything but LayerNorm (its tests forbid the fused layer norm).
EXPECTED = {"partial": {"points": 11}, "broken": {"points": 6}, "cheat": {"points": 14}}

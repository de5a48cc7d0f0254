# ruff: noqa: E501 (the strings are notebook cells; build.py formats them in the notebook)
"""Source of assignment A1 (``solutions/a1_rnn_attention/a1_rnn_attention.ipynb``) and its samples.

Run ``python solutions/_authoring/build.py a1_rnn_attention`` to rewrite the notebook and the
sample submissions in ``autograder/samples/a1_rnn_attention/``; then ``make release``.
"""

from __future__ import annotations

from nbtools import Builder

NAME = "a1_rnn_attention"

ENCODER = '''
class Encoder(nn.Module):
    """Embedding + bidirectional GRU over the source.

    forward(src (B, T) token ids, src_lengths (B,)) -> (h, c):
      h (B, T, 2H): h_i = [forward state at i; backward state at i], zero at padding positions;
      c (B, 2H):    [forward state after the last real token; backward state after the first].
    Padding comes after the real tokens; the GRU must not read it.
    """

    def __init__(self, *, vocab_size: int, embed_dim: int, hidden_dim: int, pad_id: int = 0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        x = self.embedding(src)  # (B, T, E)
        # Packing makes each direction stop at the sequence's real end: the forward GRU's final
        # state is the one after the last real token, and the backward GRU starts there.
        packed = pack_padded_sequence(
            x, src_lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, h_n = self.rnn(packed)  # h_n (2, B, H): final forward and backward states
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, T, 2H)
        c = torch.cat([h_n[0], h_n[1]], dim=-1)  # (B, 2H)
        return h, c
        ### END SOLUTION
'''

SCORES = '''
def additive_scores(
    s_prev: Tensor, h: Tensor, W_s: Tensor, W_h: Tensor, b: Tensor, v: Tensor
) -> Tensor:
    """Bahdanau's alignment scores e_i = v^T tanh(W_s s_{t-1} + W_h h_i + b), for every i at once.

    s_prev (B, S) decoder state, h (B, T, C) encoder states, W_s (A, S), W_h (A, C), b (A,),
    v (A,) -> e (B, T). The weight matrices are stored like nn.Linear weights (out x in).
    No Python loops.
    """
    ### BEGIN SOLUTION
    hidden = torch.tanh((s_prev @ W_s.T)[:, None, :] + h @ W_h.T + b)  # (B, 1, A) + (B, T, A)
    return hidden @ v  # (B, T)
    ### END SOLUTION
'''

MASKED_SOFTMAX = '''
def masked_softmax(e: Tensor, mask: Tensor) -> Tensor:
    """Softmax of the scores e (..., T) over the last axis, ignoring positions where the boolean
    keep-mask (..., T) is False: they get weight exactly 0 and the others sum to 1. A row with no
    True position gets all zeros (not NaN).
    """
    ### BEGIN SOLUTION
    e = e.masked_fill(~mask, torch.finfo(e.dtype).min)  # masked scores can never win
    return torch.softmax(e, dim=-1).masked_fill(~mask, 0.0)  # fully masked rows -> zeros
    ### END SOLUTION
'''

CONTEXT = '''
def attention_context(a: Tensor, h: Tensor) -> Tensor:
    """Context vector c = sum_i a_i h_i: weights a (B, T), states h (B, T, C) -> c (B, C)."""
    ### BEGIN SOLUTION
    return (a[:, None, :] @ h).squeeze(1)  # (B, 1, T) @ (B, T, C) -> (B, C)
    ### END SOLUTION
'''

ATTENTION = '''
class BahdanauAttention(nn.Module):
    """Additive attention: forward(s_prev (B, S), h (B, T, C), mask (B, T) keep)
    -> (context (B, C), weights (B, T)).

    W_s = query_proj.weight (A, S), W_h = key_proj.weight (A, C), b = key_proj.bias (A,),
    v = score.weight[0] (A,). Use your three functions above.
    """

    def __init__(self, *, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W_s
        self.key_proj = nn.Linear(key_dim, attention_dim)  # W_h and b
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v

    def forward(self, s_prev: Tensor, h: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        e = additive_scores(
            s_prev,
            h,
            self.query_proj.weight,
            self.key_proj.weight,
            self.key_proj.bias,
            self.score.weight[0],
        )  # (B, T)
        a = masked_softmax(e, mask)  # (B, T)
        return attention_context(a, h), a
        ### END SOLUTION
'''

DECODER = '''
class AttentionDecoder(nn.Module):
    """One step of the attention decoder (Bahdanau et al. 2015, Section 3.1):

        c_t = attention(s_{t-1}, h)              context from the PREVIOUS state
        s_t = GRUCell([e(y_{t-1}); c_t], s_{t-1})
        logits_t = out([s_t; c_t; e(y_{t-1})])

    forward(y_prev (B,) previous tokens, s_prev (B, S), h (B, T, C), mask (B, T) keep)
    -> (logits (B, V), s (B, S), a (B, T)).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        context_dim: int,
        attention_dim: int,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.init_state = nn.Linear(context_dim, hidden_dim)
        self.attention = BahdanauAttention(
            query_dim=hidden_dim, key_dim=context_dim, attention_dim=attention_dim
        )
        self.cell = nn.GRUCell(embed_dim + context_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim + context_dim + embed_dim, vocab_size)

    def initial_state(self, c: Tensor) -> Tensor:
        """s_0 = tanh(W_init c): the encoder's final state c (B, C) -> (B, S)."""
        return torch.tanh(self.init_state(c))

    def forward(
        self, y_prev: Tensor, s_prev: Tensor, h: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        ### BEGIN SOLUTION
        e = self.embedding(y_prev)  # (B, E)
        c, a = self.attention(s_prev, h, mask)  # (B, C), (B, T)
        s = self.cell(torch.cat([e, c], dim=-1), s_prev)  # (B, S)
        logits = self.out(torch.cat([s, c, e], dim=-1))  # (B, V)
        return logits, s, a
        ### END SOLUTION
'''

SEQ2SEQ = '''
class Seq2Seq(nn.Module):
    """Encoder + attention decoder. forward(src (B, T), src_lengths (B,), tgt_in (B, T_out))
    -> (logits (B, T_out, V), weights (B, T_out, T)), with teacher forcing: the decoder's input at
    step t is tgt_in[:, t] (the true previous token; tgt_in starts with [BOS]).
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 32,
        hidden_dim: int = 64,
        attention_dim: int = 64,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
    ):
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.encoder = Encoder(
            vocab_size=src_vocab_size, embed_dim=embed_dim, hidden_dim=hidden_dim, pad_id=pad_id
        )
        self.decoder = AttentionDecoder(
            vocab_size=tgt_vocab_size,
            embed_dim=embed_dim,
            hidden_dim=hidden_dim,
            context_dim=2 * hidden_dim,
            attention_dim=attention_dim,
        )

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        h, c = self.encoder(src, src_lengths)  # (B, T, C), (B, C)
        mask = source_mask(src_lengths, src.shape[1])  # (B, T)
        s = self.decoder.initial_state(c)  # (B, S)
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            logits, s, a = self.decoder(tgt_in[:, t], s, h, mask)
            all_logits.append(logits)
            all_weights.append(a)
        return torch.stack(all_logits, dim=1), torch.stack(all_weights, dim=1)
        ### END SOLUTION
'''

LOSS = '''
def sequence_loss(logits: Tensor, tgt_out: Tensor, pad_id: int = 0) -> Tensor:
    """Mean cross-entropy over the real (non-padding) target tokens.

    logits (B, T_out, V), tgt_out (B, T_out) ids with pad_id after each target's [EOS] -> scalar.
    """
    ### BEGIN SOLUTION
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad_id)
    ### END SOLUTION
'''

GREEDY = '''
@torch.no_grad()
def greedy_decode(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, max_len: int = 12
) -> tuple[Tensor, Tensor]:
    """Translate without teacher forcing: start from [BOS], feed back the arg-max token.

    Returns (tokens (B, T_out), weights (B, T_out, T)) with T_out <= max_len: tokens exclude
    [BOS], include each sequence's [EOS] and hold model.pad_id after it; stop early once every
    sequence has produced [EOS].
    """
    ### BEGIN SOLUTION
    h, c = model.encoder(src, src_lengths)
    mask = source_mask(src_lengths, src.shape[1])
    s = model.decoder.initial_state(c)
    y = torch.full((src.shape[0],), model.bos_id, dtype=torch.long, device=src.device)  # (B,)
    done = torch.zeros_like(y, dtype=torch.bool)
    tokens, weights = [], []
    for _ in range(max_len):
        logits, s, a = model.decoder(y, s, h, mask)
        y = logits.argmax(dim=-1).masked_fill(done, model.pad_id)  # (B,)
        tokens.append(y)
        weights.append(a)
        done |= y == model.eos_id
        if done.all():
            break
    return torch.stack(tokens, dim=1), torch.stack(weights, dim=1)
    ### END SOLUTION
'''


def build() -> Builder:
    nb = Builder()
    nb.md(
        r"""
        # A1: Sequence-to-sequence with Bahdanau attention

        You will build, piece by piece, the encoder-decoder with additive attention of
        Bahdanau, Cho & Bengio (2015), *Neural Machine Translation by Jointly Learning to Align
        and Translate*, train it to translate human-written dates into ISO dates
        (`"3rd of March 1992"` → `1992-03-03`), and look at where it attends.

        **Learning goals.** After this assignment you can
        1. run a bidirectional GRU over a padded batch without letting it read the padding;
        2. write the additive alignment scores $e_{t,i} = v^\top \tanh(W_s s_{t-1} + W_h h_i + b)$,
           the masked softmax over source positions and the context $c_t = \sum_i a_{t,i} h_i$;
        3. write one step of the attention decoder, the teacher-forced loss and greedy decoding;
        4. read an attention map, and explain why attention removes the fixed-size bottleneck
           of the plain encoder-decoder.
        """,
        gid="intro",
    )
    nb.md(
        r"""
        ## What is graded

        | step | graded by | points |
        |---|---|---|
        | 1. `Encoder` | hidden tests | 3 |
        | 2. `additive_scores` | hidden tests | 2 |
        | 3. `masked_softmax` | hidden tests | 3 |
        | 4. `attention_context` | hidden tests | 1 |
        | 5. `BahdanauAttention` | hidden tests | 2 |
        | 6. `AttentionDecoder` (one step) | hidden tests | 3 |
        | 7. `Seq2Seq` (teacher-forced forward) | hidden tests | 3 |
        | 8. `sequence_loss` | hidden tests | 2 |
        | 9. `greedy_decode` | hidden tests | 3 |
        | Q1 training result | by hand | 2 |
        | Q2 the attention map of a reordered date | by hand | 3 |
        | Q3 attention versus the fixed context | by hand | 3 |
        | Q4 masking | by hand | 2 |
        | **total** | | **32** (22 automatic + 10 by hand) |

        **How the automatic grading works.** Each step has a *visible check* below it: run it,
        and its message tells you what is wrong if something is. The grade itself comes from
        *hidden tests* that the instructor runs on your submitted notebook with other random
        inputs and sizes, comparing your code with a reference given the same weights and
        checking properties (padding must not matter, weights sum to 1, ...). Only your
        imports, functions, classes and constants are graded; the training and plotting cells
        are not run by the grader, so a slow experiment costs you nothing there (but the notebook
        should still run top to bottom in a few minutes).

        **Rules.** Keep every signature and the parameter names of the given `__init__` methods
        (the tests load weights into your modules by name). Do not call `course_lib`'s reference
        implementations (`course_lib.attention`, `course_lib.models`, `course_lib.layers`, ...)
        in your solutions: the point is to write them yourself, and the grader detects such
        calls (the test fails with a message naming the call). `torch`, `torch.nn` (including
        `nn.GRU`, `nn.Linear`, `torch.softmax`, `F.cross_entropy`) are all fine. `course_lib.data`,
        `course_lib.train` and `course_lib.plot` are provided for the experiments.
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
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        from torch.utils.data import DataLoader

        from course_lib.data import DATE_ORDERS, DateDataset, format_date
        from course_lib.gpu import seed_everything
        from course_lib.plot import attention_heatmap, loss_curves
        from course_lib.train import fit

        torch.set_num_threads(1)  # these models are tiny: one thread is as fast, and never oversubscribed


        def source_mask(src_lengths: Tensor, T: int) -> Tensor:
            \"\"\"Boolean keep-mask (B, T): True at the first src_lengths[b] (real) positions.\"\"\"
            positions = torch.arange(T, device=src_lengths.device)  # (T,)
            return positions[None, :] < src_lengths[:, None]  # (B, T)
        """,
        gid="setup",
    )
    nb.md(
        r"""
        ## The task: dates

        Each example is a date written by a human in one of 21 formats, and its ISO form. Sources
        are sequences of characters; targets are `[BOS] 1 9 9 2 - 0 3 - 0 3 [EOS]`. The formats
        put the day, month and year in different orders (`DATE_ORDERS` groups them into
        `"DMY"`, `"MDY"` and `"YMD"`), so to write the year first the decoder must look at the
        *end* of `"3 March 1992"` but at the *start* of `"1992 March 3"`.

        A batch (from `DateDataset.collate`) is a dict: `src (B, T)` padded with `[PAD]` = 0,
        `src_lengths (B,)`, `tgt_in (B, T_out)` (starts with `[BOS]`), `tgt_out (B, T_out)` (the
        same shifted by one, ends with `[EOS]`, then `[PAD]`).
        """,
        gid="data_md",
    )
    nb.provided(
        """
        train_set = DateDataset(3000, seed=0)
        val_set = DateDataset(500, seed=1)
        for source, target in train_set.pairs[:6]:
            print(f"{source!r:>44} -> {target}")
        batch = train_set.collate([train_set[i] for i in range(4)])
        print({name: tuple(value.shape) for name, value in batch.items()})
        print("source vocabulary:", len(train_set.src_vocab), " target vocabulary:", len(train_set.tgt_vocab))
        """,
        gid="data",
    )

    # 1. Encoder
    nb.md(
        r"""
        ## 1. The encoder (3 points)

        Embed the characters and run a **bidirectional** GRU: $h_i = [\overrightarrow{h}_i;
        \overleftarrow{h}_i]$ sees the whole source, left and right of $i$. The batch is padded
        at the end, and the GRU must not read the padding: otherwise the forward direction's final
        state is taken after a run of `[PAD]`s, and the backward direction *starts* on them. Pack
        the batch (`pack_padded_sequence(x, lengths.cpu(), batch_first=True,
        enforce_sorted=False)`), run the GRU on the packed sequence and unpack the states
        (`pad_packed_sequence(..., total_length=T)`, which puts zeros at the padding). `c` is
        the concatenation of the two directions' final states, which `nn.GRU` returns as
        `h_n (2, B, H)`.
        """,
        gid="encoder_md",
    )
    nb.solution(ENCODER, gid="encoder")
    nb.check(
        """
        from course_lib.checks.a1 import check_encoder

        check_encoder(Encoder)
        """,
        gid="check_encoder",
        points=3,
    )

    # 2-4. Scores, masked softmax, context
    nb.md(
        r"""
        ## 2. Additive alignment scores (2 points)

        Bahdanau's alignment model is a one-hidden-layer MLP of the decoder's previous state
        $s_{t-1}$ and each encoder state $h_i$:
        $$e_{t,i} = f_{att}(s_{t-1}, h_i) = v^\top \tanh(W_s s_{t-1} + W_h h_i + b).$$
        Compute it for all $i$ and the whole batch at once: $W_s s_{t-1}$ is one vector per
        example, broadcast over the $T$ positions.
        """,
        gid="scores_md",
    )
    nb.solution(SCORES, gid="additive_scores")
    nb.check(
        """
        from course_lib.checks.a1 import check_additive_scores

        check_additive_scores(additive_scores)
        """,
        gid="check_additive_scores",
        points=2,
    )
    nb.md(
        r"""
        ## 3. Masked softmax over source positions (3 points)

        $a_{t,i} = \exp(e_{t,i}) / \sum_j \exp(e_{t,j})$, where $j$ runs over the *real* source
        positions only. Padding positions must get weight exactly 0 and must not take any
        probability mass from the others, so the mask has to act **before** the softmax (fill
        the masked scores with a very negative number, e.g. `torch.finfo(e.dtype).min`, not a
        magic `-1e9`). A row with no real position at all should come out as zeros, not NaN.
        """,
        gid="softmax_md",
    )
    nb.solution(MASKED_SOFTMAX, gid="masked_softmax")
    nb.check(
        """
        from course_lib.checks.a1 import check_masked_softmax

        check_masked_softmax(masked_softmax)
        """,
        gid="check_masked_softmax",
        points=3,
    )
    nb.md(
        r"""
        ## 4. The context vector (1 point)

        $c_t = \sum_i a_{t,i} h_i$: a weighted average of the encoder states, one per example
        (a batched matrix product, or a broadcast multiply and a sum).
        """,
        gid="context_md",
    )
    nb.solution(CONTEXT, gid="attention_context")
    nb.check(
        """
        from course_lib.checks.a1 import check_attention_context

        check_attention_context(attention_context)
        """,
        gid="check_attention_context",
        points=1,
    )

    # 5. Attention module
    nb.md(
        r"""
        ## 5. The attention module (2 points)

        Put steps 2-4 together in a module whose parameters are the linear layers $W_s$,
        $W_h$ (with the bias $b$) and $v$.
        """,
        gid="attention_md",
    )
    nb.solution(ATTENTION, gid="bahdanau_attention")
    nb.check(
        """
        from course_lib.checks.a1 import check_bahdanau_attention

        check_bahdanau_attention(BahdanauAttention)
        """,
        gid="check_bahdanau_attention",
        points=2,
    )

    # 6. Decoder step
    nb.md(
        r"""
        ## 6. One step of the attention decoder (3 points)

        At step $t$ the decoder attends with its **previous** state $s_{t-1}$, then updates its
        state from the previous token's embedding and the context, then predicts the next token
        from the new state, the context and the embedding (the "deep output" of the paper,
        without its maxout layer):
        $$c_t = \sum_i a_{t,i} h_i, \qquad s_t = \mathrm{GRU}([e(y_{t-1}); c_t], s_{t-1}),
        \qquad \mathrm{logits}_t = W_o [s_t; c_t; e(y_{t-1})] + b_o.$$
        Concatenate in exactly these orders (the tests load weights into `cell` and `out`).
        """,
        gid="decoder_md",
    )
    nb.solution(DECODER, gid="decoder")
    nb.check(
        """
        from course_lib.checks.a1 import check_decoder_step

        check_decoder_step(AttentionDecoder)
        """,
        gid="check_decoder",
        points=3,
    )

    # 7. Seq2Seq
    nb.md(
        r"""
        ## 7. The whole model, with teacher forcing (3 points)

        Encode once; start the decoder from $s_0 = \tanh(W_{init} c)$ (`decoder.initial_state`);
        then run one decoder step per target position, feeding the **true** previous token
        `tgt_in[:, t]` (teacher forcing). Return the logits of all steps and the attention
        weights of all steps stacked along a new axis 1. `source_mask` (in the set-up cell) builds
        the padding mask from the lengths.
        """,
        gid="seq2seq_md",
    )
    nb.solution(SEQ2SEQ, gid="seq2seq")
    nb.check(
        """
        from course_lib.checks.a1 import check_seq2seq

        check_seq2seq(Seq2Seq)
        """,
        gid="check_seq2seq",
        points=3,
    )

    # 8. Loss
    nb.md(
        r"""
        ## 8. The teacher-forced loss (2 points)

        The negative log-likelihood of the target, $-\frac{1}{N}\sum_{b,t}\log
        p(y_{b,t} \mid y_{b,<t}, x_b)$, averaged over the $N$ real target tokens of the batch:
        padding positions must not count.
        """,
        gid="loss_md",
    )
    nb.solution(LOSS, gid="sequence_loss")
    nb.check(
        """
        from course_lib.checks.a1 import check_sequence_loss

        check_sequence_loss(sequence_loss)
        """,
        gid="check_sequence_loss",
        points=2,
    )

    # 9. Greedy decoding
    nb.md(
        r"""
        ## 9. Greedy decoding (3 points)

        At test time there is no target to feed: start every sequence from `[BOS]`, and at each
        step feed back the most likely token. A sequence that has produced `[EOS]` is finished;
        keep the batch rectangular by emitting `[PAD]` for it, and stop as soon as all sequences
        are finished (or after `max_len` steps).
        """,
        gid="greedy_md",
    )
    nb.solution(GREEDY, gid="greedy_decode")
    nb.check(
        """
        from course_lib.checks.a1 import check_greedy_decode

        check_greedy_decode(greedy_decode, Seq2Seq)
        """,
        gid="check_greedy_decode",
        points=3,
    )

    # Training
    nb.md(
        r"""
        ## Training

        The cell below trains your model with `course_lib.train.fit` (AdamW, gradient clipping,
        a progress bar) and reports the **exact-match accuracy**: the fraction of validation
        dates whose greedy translation is entirely right. With the settings given it reaches
        at least 95 % in well under a minute on a laptop CPU. You may change the settings.
        """,
        gid="train_md",
    )
    nb.provided(
        """
        def exact_match(model: nn.Module, dataset: DateDataset) -> float:
            \"\"\"Fraction of the dataset's sources whose greedy translation is exactly right.\"\"\"
            model.eval()
            batch = dataset.collate([dataset[i] for i in range(len(dataset))])
            tokens, _ = greedy_decode(model, batch["src"], batch["src_lengths"])
            right = [dataset.decode_target(row) == ex.target for row, ex in zip(tokens, dataset.examples)]
            return sum(right) / len(right)


        def date_loss(model: nn.Module, batch: dict) -> Tensor:
            logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
            return sequence_loss(logits, batch["tgt_out"], pad_id=0)
        """,
        gid="train_helpers",
    )
    nb.scratch(
        """
        seed_everything(0)
        model = Seq2Seq(src_vocab_size=len(train_set.src_vocab), tgt_vocab_size=len(train_set.tgt_vocab))
        loader = DataLoader(train_set, batch_size=64, shuffle=True, collate_fn=train_set.collate)
        history = fit(model, loader, loss_fn=date_loss, epochs=4, lr=5e-3, clip_grad=1.0, device="cpu")
        accuracy = exact_match(model, val_set)
        print(f"exact match on {len(val_set)} validation dates: {accuracy:.1%}")
        loss_curves(history, title="training loss");
        """
    )
    nb.written(
        r"""
        **Q1 (2 points).** What exact-match accuracy did your model reach on the validation
        set, after how many optimisation steps? (At least 95 % is expected.) If you changed the
        settings, say what and why.
        """,
        """
        With the given settings (4 epochs of 47 batches of 64, i.e. 188 AdamW steps at learning
        rate 5e-3, gradient norm clipped to 1) the model reaches about 97-99 % exact match on
        the 500 validation dates; the loss falls below 0.01 during the third epoch.
        """,
        gid="q1_training",
        points=2,
    )

    # Attention plot
    nb.md(
        r"""
        ## Where does the decoder look?

        The same date written with its fields in the three orders. Each heatmap row is one
        output character, each column one source character; the colour is $a_{t,i}$.
        """,
        gid="plot_md",
    )
    nb.provided(
        """
        def show_attention(model: nn.Module, sources: list[str]) -> None:
            vocab = train_set.src_vocab
            fig, axes = plt.subplots(1, len(sources), figsize=(5.5 * len(sources), 4.5))
            for ax, source in zip(axes, sources):
                src = torch.tensor([vocab.encode(source)])
                tokens, weights = greedy_decode(model, src, torch.tensor([src.shape[1]]))
                n = int((tokens[0] != 0).sum())  # up to and including [EOS]
                output = train_set.tgt_vocab.decode(tokens[0, :n], stop_at_eos=False, strip_special=False)
                attention_heatmap(weights[0, :n], list(source), output, ax=ax, colorbar=False,
                                  title=repr(source))
            fig.tight_layout()
            plt.show()


        import datetime

        day = datetime.date(1992, 3, 14)
        show_attention(model, [format_date(day, "d_month_y"), format_date(day, "month_d_y"),
                               format_date(day, "y_month_d")])
        """,
        gid="plot",
    )
    nb.written(
        r"""
        **Q2 (3 points).** Describe the three maps. Which source characters does the decoder
        attend to while it writes the year, the month and the day, and why is the map of
        `"14 March 1992"` not a diagonal? What does the decoder look at while it writes the
        dashes, and while it writes `[EOS]`? How does the same model handle the month written
        as a word?
        """,
        """
        The output is always year-month-day, so the attention follows the *source's* positions of
        those fields: while writing the year the decoder looks at the end of "14 March 1992" and
        "March 14, 1992" but at the start of "1992 March 14", then it jumps to the month and to
        the day wherever they are: the map is a permutation of blocks, not a diagonal, and the
        off-diagonal jumps are exactly the reordering of the fields. Within a field the rows are
        sharp: each output digit looks at the source digit it copies ("2" at "2", the day's "1"
        and "4" at "1" and "4"). The century is an exception worth noticing: "1" and "9" attend
        to the *last* two digits of the year, because in this data set the century follows from
        them (years 1950-2049: "92" means 1992). The month digits "03" attend, more diffusely, to
        the letters of "March" (its first letters identify it): the number is not in the source,
        attention finds the evidence and the decoder's output layer converts it. The dashes need
        no source information (the state knows a dash comes next), so their weights are spread
        out; [EOS] looks at the end of the last field it wrote (the day), where it knows the date
        is complete.
        """,
        gid="q2_attention",
        points=3,
    )

    # Bottleneck comparison
    nb.md(
        r"""
        ## Attention versus a fixed context

        Without attention the decoder sees the source only through one vector, the encoder's
        final state $c$ (Cho et al. 2014; `course_lib`'s `seq2seq-gru` model). To see what
        that costs as the source grows, both kinds of model are trained on dates surrounded by
        0-4 filler words (`"um well 14 March 1992 please"`), the fixed-context one with about
        twice the compute of yours (it learns more slowly), and then tested with a growing
        number of filler words *after* the date, up to 24 (far longer than any training source):
        everything the decoder needs is then further and further from the end of the source.
        """,
        gid="bottleneck_md",
    )
    nb.scratch(
        """
        filler_set = DateDataset(2400, seed=3, filler_words=(0, 4))
        filler_loader = DataLoader(filler_set, batch_size=64, shuffle=True, collate_fn=filler_set.collate)
        print(filler_set.pairs[0])
        seed_everything(0)
        attentive = Seq2Seq(src_vocab_size=len(train_set.src_vocab), tgt_vocab_size=len(train_set.tgt_vocab))
        fit(attentive, filler_loader, loss_fn=date_loss, epochs=4, lr=5e-3, clip_grad=1.0, device="cpu");
        """
    )
    nb.provided(
        """
        from course_lib.models import create

        seed_everything(0)
        fixed = create("seq2seq-gru", src_vocab_size=len(train_set.src_vocab),
                       tgt_vocab_size=len(train_set.tgt_vocab), embed_dim=32, hidden_dim=128)
        fixed_optimizer = torch.optim.AdamW(fixed.parameters(), lr=5e-3)
        fit(fixed, filler_loader, loss_fn=lambda m, b: m.loss(b), optimizer=fixed_optimizer,
            epochs=6, clip_grad=1.0, device="cpu");
        """,
        gid="baseline",
    )
    nb.provided(
        """
        # six more epochs (in a second cell, to keep every cell short)
        fit(fixed, filler_loader, loss_fn=lambda m, b: m.loss(b), optimizer=fixed_optimizer,
            epochs=6, clip_grad=1.0, device="cpu");
        """,
        gid="baseline_more",
    )
    nb.provided(
        """
        import random

        from course_lib.data import generate_date_examples
        from course_lib.data.dates import FILLER_WORDS


        def accuracy_with_trailing_filler(n_words: int, n: int = 300) -> dict[str, float]:
            \"\"\"Exact match of both models on n dates followed by n_words filler words.\"\"\"
            examples = generate_date_examples(n, seed=100 + n_words)
            rng = random.Random(n_words)
            sources = [" ".join([e.source, *rng.choices(FILLER_WORDS, k=n_words)]) for e in examples]
            src_ids = [torch.tensor(train_set.src_vocab.encode(s)) for s in sources]
            lengths = torch.tensor([len(s) for s in src_ids])
            src = nn.utils.rnn.pad_sequence(src_ids, batch_first=True)
            with torch.no_grad():
                ours, _ = greedy_decode(attentive.eval(), src, lengths)
                theirs = fixed.eval().greedy_decode(src, src_lengths=lengths, max_len=12)
            right = {
                name: sum(train_set.decode_target(o) == e.target for o, e in zip(out, examples)) / n
                for name, out in (("with attention", ours), ("fixed context", theirs))
            }
            return {**right, "mean length": lengths.float().mean().item()}


        counts = [0, 4, 8, 16, 24]
        results = [accuracy_with_trailing_filler(k) for k in counts]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name in ("with attention", "fixed context"):
            ax.plot(counts, [r[name] for r in results], marker="o", label=name)
        ax.set_xlabel("filler words after the date (training sources had at most 4 in all)")
        ax.set_ylabel("exact match")
        ax.set_ylim(0, 1.02)
        ax.legend()
        plt.show()
        for k, r in zip(counts, results):
            print(f"{k:2d} words after the date (mean source length {r['mean length']:4.1f} chars): "
                  f"attention {r['with attention']:.0%}, fixed context {r['fixed context']:.0%}")
        """,
        gid="bottleneck",
    )
    nb.written(
        r"""
        **Q3 (3 points).** Compare the two models: overall, and as the date moves away from
        the end of the source. Explain the difference with what each decoder can see. Name one
        more thing the attention model gives you that the fixed-context one does not (think of
        the maps above). What is the price of attention, per output token, as a function of the
        source length $T$?
        """,
        """
        Even with half the compute, the attention model is better everywhere (about 95 %
        against about 70 % for the fixed context on sources like the training ones), and it stays
        nearly flat as filler words are added after the date, far beyond the lengths seen in
        training, while the fixed-context model falls steadily (to about 35-40 % with 24 words
        after the date). The fixed-context decoder sees the source
        only through c, the GRU state after the last token: every field of the date must be
        carried, in one vector, through every later step, so each filler word after the date is
        another chance to overwrite it, and its accuracy drops as the date moves away from the
        end (and it learns slowly: all the information must be squeezed into c before the first
        output). With attention the decoder reads each encoder state directly at every step: the
        path from a source character to an output character is short whatever T is, and filler
        simply gets no weight. Attention also gives an alignment for free: which source
        characters each output came from (the maps of Q2), and gradients that reach every source
        position directly. The price: at every output step T scores and a weighted sum of T
        states, i.e. O(T) work per output token (O(T T_out) per sentence), and all T encoder
        states kept in memory, instead of O(1) per step with a fixed context.
        """,
        gid="q3_bottleneck",
        points=3,
    )
    nb.written(
        r"""
        **Q4 (2 points).** Suppose `masked_softmax` multiplied the softmax's output by the
        mask instead of masking the scores before it. What would change for (a) the attention
        weights and the context of a short source in a batch of long ones, and (b) the model's
        predictions when the same date is padded to different lengths?
        """,
        """
        (a) The softmax would spread probability over the padding positions too; zeroing them
        afterwards leaves the real positions' weights summing to less than 1 (by an amount that
        depends on how much padding there is), so the context is a shrunken, wrongly scaled
        average of the real states. (b) The amount of padding depends on the other sources in
        the batch, so the same date would get different contexts and possibly different
        translations depending on its batch: the model's output would depend on padding. Masking
        the scores before the softmax gives padding exactly zero weight and renormalises over
        the real positions, so the result is independent of the padding.
        """,
        gid="q4_masking",
        points=2,
    )
    return nb


# --------------------------------------------------------------------------------------------
# Sample submissions
# --------------------------------------------------------------------------------------------

PARTIAL = {
    # masked_softmax applied after the softmax (a classic); context and loss right; greedy left out
    "masked_softmax": '''
def masked_softmax(e: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis, ignoring masked positions."""
    return torch.softmax(e, dim=-1) * mask
''',
    "greedy_decode": '''
@torch.no_grad()
def greedy_decode(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, max_len: int = 12
) -> tuple[Tensor, Tensor]:
    """Translate without teacher forcing."""
    # YOUR CODE HERE
    raise NotImplementedError()
''',
    # the encoder ignores the lengths: the GRU reads the padding
    "encoder": '''
class Encoder(nn.Module):
    """Embedding + bidirectional GRU over the source."""

    def __init__(self, *, vocab_size: int, embed_dim: int, hidden_dim: int, pad_id: int = 0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        out, h_n = self.rnn(self.embedding(src))
        return out, torch.cat([h_n[0], h_n[1]], dim=-1)
''',
}

BROKEN = {
    # a syntax error in one cell, a crash in another, a wrong loss: the rest still gets graded
    "additive_scores": """
def additive_scores(s_prev, h, W_s, W_h, b, v):
    hidden = torch.tanh((s_prev @ W_s.T)[:, None, :] + h @ W_h.T + b
    return hidden @ v
""",
    "attention_context": """
def attention_context(a, h):
    return a @ h  # (B, T) @ (B, T, C): shapes do not match
""",
    "sequence_loss": """
def sequence_loss(logits, tgt_out, pad_id=0):
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())
""",
}

CHEAT = {
    # hides a call to course_lib's reference behind strings built at run time: the static scan
    # cannot see it, the worker's runtime detection does (every test that reaches it fails)
    "masked_softmax": """
def masked_softmax(e: Tensor, mask: Tensor) -> Tensor:
    import importlib

    library = importlib.import_module("course_" + "lib.attention")
    return getattr(library, "masked_" + "softmax")(e, mask)
""",
}

SAMPLES = {
    "partial": PARTIAL,
    "broken": BROKEN,
    "cheat": CHEAT,
}

# Scores of the samples (out of 22 automatic points), checked by `make selfgrade` and the tests:
# partial: encoder shapes 1 + scores 2 + softmax without padding 1 + context 1 + loss 2;
# broken: encoder 3 + masked_softmax 3 (the syntax error removes additive_scores and everything
# built on it); cheat: only the tests that never reach masked_softmax (encoder, scores, context,
# loss).
EXPECTED = {"partial": {"points": 7}, "broken": {"points": 6}, "cheat": {"points": 8}}
UNPARSABLE = ("broken",)

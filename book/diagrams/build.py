"""Draw the book's architecture diagrams as SVG: `.venv/bin/python book/diagrams/build.py`.

Writes book/figures/<name>.svg for every function in DIAGRAMS. The output is deterministic, so
tests/book/test_diagrams.py can check that the committed files are what this script draws.
Colours: one Okabe-Ito tint per kind of layer (svgkit.KINDS), the same in every diagram.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from svgkit import KINDS, MUTED, OKABE_ITO, Figure, kind_colours, text_width, tint  # noqa: E402, F401

FIGURES = Path(__file__).resolve().parents[1] / "figures"
GREY = "#555555"
BLUE, ORANGE, VERM = OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["vermillion"]


def seq2seq_attention() -> Figure:
    f = Figure(
        760,
        440,
        "Sequence-to-sequence model with additive (Bahdanau) attention",
        "Bidirectional encoder RNN states h1 to h4 over the inputs x1 to x4. The previous "
        "decoder state "
        "s(t-1) is scored against every encoder state, the scores e(t,i) go through a softmax "
        "over i to give weights a(t,i), and the context c(t) is the weighted sum of the "
        "encoder states. The decoder state s(t) is computed from s(t-1), the previous output "
        "y(t-1) and c(t), and predicts the output y(t).",
    )
    cols = [180 + 95 * i for i in range(4)]
    bw = 60
    rows = {"y_out": 22, "ctx": 92, "a": 180, "e": 248, "h": 326, "h2": 342, "x": 398}
    labels = {
        "ctx": "context",
        "a": "weights",
        "e": "scores",
        "h": "encoder states",
        "h2": "(bidirectional)",
        "x": "inputs",
    }
    for key, lab in labels.items():
        f.text(112, rows[key] + 16, lab, size=12, anchor="end", colour=MUTED)
    f.text(112, rows["a"] + 32, "softmax over i", size=11, anchor="end", colour=MUTED, italic=True)
    # query bus from the decoder state s_{t-1} to every score (drawn first: values pass over)
    dec_x = 630
    bus_y = 304
    f.arrow(
        [
            (dec_x - 40, rows["h"] + 18),
            (560, rows["h"] + 18),
            (560, bus_y),
            (cols[0] + 14, bus_y),
            (cols[0] + 14, rows["e"] + 33),
        ],
        colour=BLUE,
        dash="5,3",
    )
    for cx in cols[1:]:
        f.arrow([(cx + 14, bus_y), (cx + 14, rows["e"] + 33)], colour=BLUE, dash="5,3")
    for i, cx in enumerate(cols):
        n = "₁₂₃₄"[i]
        f.box(cx - 26, rows["x"], 52, 28, f"x{n}", kind="token")
        f.arrow([(cx, rows["x"]), (cx, rows["h"] + 37)])
        f.box(cx - bw / 2, rows["h"], bw, 36, f"h{n}", kind="rnn")
        if i < 3:  # a bidirectional RNN: forward and backward recurrences
            nx = cols[i + 1] - bw / 2
            f.arrow([(cx + bw / 2, rows["h"] + 28), (nx, rows["h"] + 28)])
            f.arrow([(nx, rows["h"] + 19), (cx + bw / 2, rows["h"] + 19)])
        f.arrow([(cx - 12, rows["h"]), (cx - 12, rows["e"] + 33)])
        f.box(cx - bw / 2, rows["e"], bw, 32, f"eₜ,{'₁₂₃₄'[i]}", kind="attention")
        f.arrow([(cx, rows["e"]), (cx, rows["a"] + 33)])
        f.box(cx - bw / 2, rows["a"], bw, 32, f"aₜ,{'₁₂₃₄'[i]}", kind="softmax")
        f.arrow([(cx, rows["a"]), (cx, rows["ctx"] + 37)])
        # the value h_i travels up beside its column into the weighted sum
        vx = cx + 40
        f.arrow(
            [(cx + bw / 2, rows["h"] + 10), (vx, rows["h"] + 10), (vx, rows["ctx"] + 37)],
            colour=GREY,
            sw=1.2,
            halo=True,
        )
    f.lines(
        510, bus_y - 26, ["query sₜ₋₁,", "to every score"], size=11, anchor="start", colour=BLUE
    )
    f.box(140, rows["ctx"], 430, 36, "cₜ = Σᵢ aₜ,ᵢ hᵢ", kind="linear")
    # decoder
    f.box(dec_x - 40, rows["h"], 80, 36, "sₜ₋₁", kind="rnn")
    f.box(dec_x - 40, rows["ctx"], 80, 36, "sₜ", kind="rnn")
    f.arrow([(dec_x, rows["h"]), (dec_x, rows["ctx"] + 37)])
    f.arrow([(570, rows["ctx"] + 18), (dec_x - 41, rows["ctx"] + 18)])
    f.box(690, rows["a"], 56, 32, "yₜ₋₁", kind="token")
    f.arrow([(718, rows["a"]), (718, rows["ctx"] + 24), (dec_x + 41, rows["ctx"] + 24)])
    f.box(dec_x - 30, rows["y_out"], 60, 30, "yₜ", kind="token")
    f.arrow([(dec_x, rows["ctx"]), (dec_x, rows["y_out"] + 31)])
    f.text(dec_x + 8, rows["e"] + 16, "decoder", size=12, anchor="start", colour=MUTED)
    f.text(dec_x + 8, rows["e"] + 32, "state", size=12, anchor="start", colour=MUTED)
    f.text(
        140,
        rows["y_out"] + 15,
        "eₜ,ᵢ = f_{att}(sₜ₋₁, hᵢ),  aₜ,ᵢ = softmaxᵢ(eₜ,ᵢ),  sₜ = g(yₜ₋₁, sₜ₋₁, cₜ)",
        size=12,
        anchor="start",
        colour=MUTED,
    )
    return f


def attention_qkv() -> Figure:
    f = Figure(
        760,
        420,
        "The attention layer: queries, keys and values",
        "Queries X_Q and the inputs X are projected by W_Q, W_K and W_V into Q, K and V. "
        "The scores Q K-transpose are scaled by one over the square root of D_Q, optionally "
        "masked, and a softmax over the keys turns each row into weights A; the output is "
        "Y = A V, one row per query.",
    )
    f.box(20, 56, 130, 48, "queries X_{Q}", kind="token", sub="N_{Q} × D")
    f.box(20, 236, 130, 48, "inputs X", kind="token", sub="N_{X} × D")
    f.box(200, 58, 80, 44, "W_{Q}", kind="linear")
    f.box(200, 178, 80, 44, "W_{K}", kind="linear")
    f.box(200, 298, 80, 44, "W_{V}", kind="linear")
    f.arrow([(151, 80), (199, 80)])
    f.arrow([(151, 252), (175, 252), (175, 200), (199, 200)])
    f.arrow([(151, 268), (175, 268), (175, 320), (199, 320)])
    # Q and K into the product
    f.arrow([(281, 80), (380, 80), (380, 129)])
    f.text(296, 66, "Q  (N_{Q} × D_{Q})", size=12, anchor="start")
    f.arrow([(281, 200), (420, 200), (420, 175)])
    f.text(296, 186, "K  (N_{X} × D_{Q})", size=12, anchor="start")
    f.box(340, 130, 130, 44, "Q K^{⊤}", kind="attention", sub="matrix product")
    f.box(500, 130, 100, 44, "÷ √D_{Q}", kind="attention", sub="scale")
    f.box(630, 130, 110, 44, "mask", kind="attention", sub="optional")
    f.arrow([(471, 152), (499, 152)])
    f.arrow([(601, 152), (629, 152)])
    f.box(630, 214, 110, 44, "softmax", kind="softmax", sub="over keys")
    f.arrow([(685, 175), (685, 213)])
    f.box(630, 298, 110, 44, "A V", kind="attention", sub="weighted sum")
    f.arrow([(685, 259), (685, 297)])
    f.text(677, 278, "A  (N_{Q} × N_{X})", size=12, anchor="end")
    f.arrow([(281, 320), (629, 320)])
    f.text(296, 306, "V  (N_{X} × D_{V})", size=12, anchor="start")
    f.arrow([(685, 343), (685, 370)])
    f.text(740, 384, "output Y  (N_{Q} × D_{V})", size=13, weight="bold", anchor="end")
    f.text(296, 360, "self-attention: X_{Q} = X", size=12, colour=MUTED, anchor="start")
    f.text(
        20,
        406,
        "Multi-head: H such layers in parallel, outputs concatenated and projected by W_{O}.",
        size=12,
        anchor="start",
        colour=MUTED,
    )
    f.text(
        20,
        22,
        "Rows are tokens: Q = X_{Q} W_{Q}, K = X W_{K}, V = X W_{V}, "
        "A = softmax(Q K^{⊤} / √D_{Q}), Y = A V.",
        size=12,
        anchor="start",
        colour=MUTED,
    )
    return f


def _sublayers(f: Figure, x, y_bottom, w, specs, side):
    """Stack sublayers bottom-up with residual bypasses; returns the tops of the boxes."""
    h, gap = 34, 22
    y = y_bottom
    tops = []
    cx = x + w / 2
    for label, kind in specs:
        y -= h
        f.box(x, y, w, h, label, kind=kind, size=12)
        tops.append(y)
        y -= gap
    for top in tops[:-1]:  # arrows between consecutive sublayers
        f.arrow([(cx, top), (cx, top - gap)])
    # residuals: from below each sublayer around it to the add & norm that follows
    sx = x - 16 if side == "left" else x + w + 16
    edge = x if side == "left" else x + w
    for i, (_, kind) in enumerate(specs):
        if kind == "norm":
            start_y = tops[i - 1] + h + gap / 2
            f.line([(cx, start_y), (sx, start_y)], colour=GREY)
            f.arrow([(sx, start_y), (sx, tops[i] + h / 2), (edge, tops[i] + h / 2)], colour=GREY)
    return tops


def transformer() -> Figure:
    f = Figure(
        760,
        660,
        "The encoder-decoder Transformer",
        "Left, the encoder: input tokens are embedded, positional encodings are added, and N "
        "identical blocks apply multi-head self-attention and a position-wise feed-forward "
        "network, each followed by a residual connection and layer normalisation (add & "
        "norm). Right, the decoder: the output tokens shifted right are embedded, positional "
        "encodings are added, and N blocks apply masked multi-head self-attention, "
        "multi-head cross-attention whose keys and values come from the encoder output, and "
        "a feed-forward network, each with add & norm; a linear layer and a softmax give the "
        "next-token probabilities.",
    )
    ex, dx, w = 100, 450, 210
    base = 496
    enc_specs = [
        ("Multi-head self-attention", "attention"),
        ("Add & norm", "norm"),
        ("Feed-forward", "ffn"),
        ("Add & norm", "norm"),
    ]
    dec_specs = [
        ("Masked multi-head attention", "attention"),
        ("Add & norm", "norm"),
        ("Multi-head cross-attention", "attention"),
        ("Add & norm", "norm"),
        ("Feed-forward", "ffn"),
        ("Add & norm", "norm"),
    ]
    e_gray = base - 4 * 34 - 3 * 22 - 40
    d_gray = base - 6 * 34 - 5 * 22 - 40
    for x0, top, label in ((ex, e_gray, "Encoder"), (dx, d_gray, "Decoder")):
        f.rect(x0 - 30, top, w + 60, base + 20 - top, fill="#F4F4F4", stroke="#999999", rx=10)
        f.text(x0 - 22, top + 15, label, size=13, anchor="start", weight="bold")
    f.text(ex - 40, (e_gray + base) / 2, "N×", size=16, anchor="end", weight="bold")
    f.text(dx + w + 40, (d_gray + base) / 2, "×N", size=16, anchor="start", weight="bold")
    e_tops = _sublayers(f, ex, base, w, enc_specs, "left")
    d_tops = _sublayers(f, dx, base, w, dec_specs, "right")
    # embeddings and positional encodings
    for x0, tok, emb in (
        (ex, "Input tokens", "Input embedding"),
        (dx, "Outputs, shifted right", "Output embedding"),
    ):
        cx = x0 + w / 2
        f.box(x0, 618, w, 30, tok, kind="token", size=12)
        f.box(x0, 566, w, 32, emb, kind="embedding", size=12)
        f.arrow([(cx, 618), (cx, 599)])
        f.plus(cx, 542)
        f.arrow([(cx, 566), (cx, 552)])
        f.arrow([(cx, 533), (cx, base + 1)])
        sign = -1 if x0 == ex else 1
        f.line([(cx + sign * 9, 542), (cx + sign * 16, 542)], colour=GREY)
        f.text(
            cx + sign * 20,
            542,
            "positional encoding",
            size=11,
            anchor="end" if sign < 0 else "start",
            colour=MUTED,
        )
    # encoder output to the cross-attention (keys and values)
    ecx = ex + w / 2
    cross_y = d_tops[2] + 17
    f.arrow(
        [
            (ecx, e_tops[-1]),
            (ecx, e_gray - 22),
            (380, e_gray - 22),
            (380, cross_y),
            (dx - 1, cross_y),
        ],
        colour=VERM,
        sw=1.8,
    )
    f.text(388, cross_y - 12, "K, V", size=12, anchor="start", colour=VERM, weight="bold")
    f.text(ecx + 6, e_gray - 34, "encoder output", size=11, anchor="start", colour=VERM)
    f.text(dx + w / 2 - 6, d_tops[2] + 45, "Q", size=12, anchor="end", weight="bold")
    # output head
    dcx = dx + w / 2
    f.arrow([(dcx, d_tops[-1]), (dcx, 81)])
    f.box(dx, 50, w, 30, "Linear", kind="linear", size=12)
    f.arrow([(dcx, 50), (dcx, 39)])
    f.box(dx, 8, w, 30, "Softmax", kind="softmax", size=12)
    f.text(dx + w + 12, 17, "next-token", size=11, anchor="start", colour=MUTED)
    f.text(dx + w + 12, 31, "probabilities", size=11, anchor="start", colour=MUTED)
    f.legend(20, 20, ["attention", "ffn", "norm"], size=11, step=150)
    f.legend(20, 42, ["embedding", "linear", "softmax"], size=11, step=150)
    return f


def bert_vs_gpt() -> Figure:
    f = Figure(
        760,
        410,
        "BERT versus GPT: bidirectional versus causal self-attention",
        "Two panels. Left, BERT, a Transformer encoder: every output position attends to every "
        "input position, in both directions, and the model predicts masked tokens such as "
        "'cat' at the [MASK] position. Right, GPT, a Transformer decoder: position i attends "
        "only to positions up to i, and the model predicts the next token at every position. "
        "Under each panel, the attention pattern as a 5 by 5 grid of allowed query-key pairs: "
        "full for BERT, lower-triangular for GPT.",
    )
    panels = [
        (
            20,
            "BERT: bidirectional (encoder)",
            ["[CLS]", "the", "[MASK]", "sat", "[SEP]"],
            ["", "", "cat", "", ""],
            False,
        ),
        (
            400,
            "GPT: causal (decoder)",
            ["the", "cat", "sat", "on", "the"],
            ["cat", "sat", "on", "the", "mat"],
            True,
        ),
    ]
    for x0, title, toks, outs, causal in panels:
        f.text(x0 + 170, 20, title, size=14, weight="bold")
        xs = [x0 + 30 + 70 * i for i in range(5)]
        top_y, bot_y = 76, 196
        for j, xj in enumerate(xs):  # edges first, boxes on top
            for i, xi in enumerate(xs):
                if causal and j > i:
                    continue
                f.line([(xj, bot_y), (xi, top_y + 30)], colour=tint(ORANGE, 0.9), sw=1.1)
        for i, x in enumerate(xs):
            f.box(x - 30, bot_y, 60, 28, toks[i], kind="token", size=12)
            f.box(x - 30, top_y, 60, 30, f"h{'₁₂₃₄₅'[i]}", kind="attention", size=12)
            if outs[i]:
                f.arrow([(x, top_y), (x, 55)], colour=GREY, sw=1.2)
                f.text(x, 44, outs[i], size=12, weight="bold", colour=VERM)
        # allowed (query, key) pairs
        gx, gy, c = x0 + 112, 262, 18
        for q in range(5):
            for k in range(5):
                ok = not (causal and k > q)
                fill = kind_colours("attention")[0] if ok else "#FFFFFF"
                f.rect(gx + k * c, gy + q * c, c, c, fill=fill, stroke="#888888", sw=0.8, rx=0)
        f.text(gx + 2.5 * c, gy + 5 * c + 12, "keys →", size=11, colour=MUTED)
        f.lines(gx - 8, gy + 2.5 * c, ["queries", "↓"], size=11, anchor="end", colour=MUTED)
    f.text(190, 236, "predict masked tokens from both sides", size=12, colour=MUTED)
    f.text(570, 236, "predict the next token from the left only", size=12, colour=MUTED)
    f.text(380, 392, "Shaded cells: query i may attend to key j.", size=12, colour=MUTED)
    return f


def vit() -> Figure:
    f = Figure(
        760,
        470,
        "Vision Transformer (ViT)",
        "An image is cut into a 3 by 3 grid of patches. Each patch is flattened and mapped by "
        "one shared linear projection to a token; a learnable [CLS] token is prepended and a "
        "learned position embedding (0 to 9) is added to every token. The sequence goes "
        "through a Transformer encoder of L blocks (layer norm, multi-head self-attention, "
        "layer norm, MLP, with residuals); the encoder output at the [CLS] position goes to "
        "an MLP head that predicts the class.",
    )
    # image: 3 x 3 patches
    ix, iy, p = 20, 322, 40
    shades = [0.18, 0.32, 0.22, 0.4, 0.55, 0.3, 0.5, 0.7, 0.45]
    for r in range(3):
        for c in range(3):
            f.rect(
                ix + c * p,
                iy + r * p,
                p,
                p,
                fill=tint(OKABE_ITO["sky"], shades[3 * r + c]),
                stroke="#FFFFFF",
                sw=2,
                rx=0,
            )
            f.text(ix + c * p + p / 2, iy + r * p + p / 2, str(3 * r + c + 1), size=11)
    f.text(ix + 60, iy + 3 * p + 15, "image, 3 × 3 patches", size=12, colour=MUTED)
    slot = [200 + 56 * i for i in range(10)]
    ty = 430
    for i in range(1, 10):  # flattened patches
        f.rect(
            slot[i] - 14,
            ty,
            28,
            22,
            fill=tint(OKABE_ITO["sky"], shades[i - 1]),
            stroke="#888888",
            sw=1,
            rx=2,
        )
        f.text(slot[i], ty + 11, str(i), size=11)
    f.arrow([(ix + 3 * p + 4, ty + 11), (slot[1] - 18, ty + 11)])
    f.text((ix + 3 * p + slot[1]) / 2 - 6, ty + 28, "flatten", size=11, colour=MUTED)
    f.box(
        slot[1] - 22,
        364,
        slot[9] - slot[1] + 44,
        32,
        "Linear projection of flattened patches (shared)",
        kind="linear",
        size=12,
    )
    for i in range(1, 10):
        f.arrow([(slot[i], ty), (slot[i], 397)])
    # tokens with position embeddings
    ey = 294
    for i in range(10):
        x = slot[i]
        f.box(x - 26, ey, 20, 28, str(i), kind="embedding", size=11, rx=3)
        f.plus(x + 1, ey + 14, r=6)
        label = "*" if i == 0 else ""
        f.box(x + 8, ey, 20, 28, label, kind="token" if i == 0 else "linear", size=13, rx=3)
        if i:
            f.arrow([(x + 18, 364), (x + 18, ey + 29)])
    f.text(slot[0] - 8, ey + 46, "learned [CLS]", size=11, colour=MUTED)
    f.lines(
        slot[0] - 32,
        ey + 14,
        ["position", "embedding", "⊕ token"],
        size=11,
        anchor="end",
        colour=MUTED,
    )
    # encoder
    f.rect(slot[0] - 30, 176, slot[9] - slot[0] + 60, 80, fill="#F4F4F4", stroke="#999999", rx=10)
    f.text((slot[0] + slot[9]) / 2, 198, "Transformer encoder  (L×)", size=14, weight="bold")
    sub = [
        ("Layer norm", "norm"),
        ("Multi-head self-attention", "attention"),
        ("Layer norm", "norm"),
        ("MLP", "ffn"),
    ]
    x = slot[0] - 14
    for label, kind in sub:
        wid = 14 + 7.6 * len(label)
        f.box(x, 214, wid, 28, label, kind=kind, size=11)
        if label != "MLP":
            f.arrow([(x + wid, 228), (x + wid + 13, 228)])
        x += wid + 14
    f.text(x + 4, 228, "+ residuals", size=11, anchor="start", colour=MUTED)
    for i in range(10):
        f.arrow([(slot[i] + 18, ey), (slot[i] + 18, 257)])
    # head on [CLS]
    f.arrow([(slot[0] + 18, 176), (slot[0] + 18, 127)], colour=VERM, sw=1.8)
    for i in range(1, 10):
        f.line([(slot[i] + 18, 176), (slot[i] + 18, 160)], colour="#AAAAAA", dash="3,3")
    f.text(
        slot[1] + 4,
        146,
        "patch outputs unused by the classifier",
        size=11,
        anchor="start",
        colour=MUTED,
    )
    f.box(slot[0] - 32, 94, 100, 32, "MLP head", kind="ffn", size=12)
    f.arrow([(slot[0] + 18, 94), (slot[0] + 18, 63)])
    f.box(slot[0] - 32, 30, 100, 32, "class", kind="softmax", size=12)
    f.text(slot[0] + 84, 46, "e.g. bird, ball, car …", size=12, anchor="start", colour=MUTED)
    f.legend(320, 92, ["embedding", "linear", "attention"], size=11, step=150)
    f.legend(320, 114, ["norm", "ffn", "softmax"], size=11, step=150)
    return f


def swin_windows() -> Figure:
    f = Figure(
        760,
        290,
        "Swin Transformer: regular and shifted windows",
        "Three 8 by 8 feature maps of patches. (a) Layer l: the map is cut into 2 by 2 "
        "windows of M by M = 4 by 4 patches and self-attention runs inside each window. (b) "
        "Layer l+1: the window grid is shifted by M/2 = 2 patches, giving 9 windows, labelled "
        "A to I, of sizes 2, 4 or 2 patches per side, so information crosses the previous "
        "windows' borders. (c) The efficient implementation: the map is rolled cyclically by "
        "(-2, -2), which moves the top rows to the bottom and the left columns to the right, "
        "so the same 2 by 2 regular windows can be used; a mask stops patches that came from "
        "different regions (different letters) from attending to each other.",
    )
    c = 20
    colours = [
        "orange",
        "sky",
        "green",
        "yellow",
        "blue",
        "vermillion",
        "purple",
        "black",
        "orange",
    ]
    amounts = [0.45, 0.45, 0.35, 0.55, 0.3, 0.35, 0.45, 0.12, 0.15]

    def region(k: int) -> int:  # shifted-window band of row/column k (borders at 2 and 6)
        return 0 if k < 2 else (1 if k < 6 else 2)

    def draw_map(x0, y0, cell_id, borders, letters):
        for r in range(8):
            for q in range(8):
                w = cell_id(r, q)
                fill = tint(OKABE_ITO[colours[w]], amounts[w])
                f.rect(x0 + q * c, y0 + r * c, c, c, fill=fill, stroke="#FFFFFF", sw=1, rx=0)
        for b in borders:  # window borders
            f.line([(x0 + b * c, y0), (x0 + b * c, y0 + 8 * c)], colour="#222222", sw=2.5)
            f.line([(x0, y0 + b * c), (x0 + 8 * c, y0 + b * c)], colour="#222222", sw=2.5)
        f.rect(x0, y0, 8 * c, 8 * c, fill="none", stroke="#222222", sw=2.5, rx=0)
        for (r, q), s in letters.items():
            f.text(x0 + q * c, y0 + r * c, s, size=14, weight="bold")

    y0 = 40
    xa, xb, xc = 30, 300, 570
    regular = [0, 2, 6, 4]  # colours of the four regular windows
    draw_map(xa, y0, lambda r, q: regular[2 * (r // 4) + q // 4], [4], {})
    names = "ABCDEFGHI"

    def shifted(r, q):
        return 3 * region(r) + region(q)

    centre = {0: 1, 1: 4, 2: 7}
    letters_b = {(centre[a], centre[b]): names[3 * a + b] for a in range(3) for b in range(3)}
    draw_map(xb, y0, shifted, [2, 6], letters_b)

    def rolled(r, q):
        return shifted((r + 2) % 8, (q + 2) % 8)

    # rolled map: rows [0,4) come from the middle band, [4,6) the bottom one, [6,8) the top one
    rc = {1: 2, 2: 5, 0: 7}
    letters_c = {(rc[a], rc[b]): names[3 * a + b] for a in range(3) for b in range(3)}
    draw_map(xc, y0, rolled, [4], letters_c)
    f.arrow([(xa + 8 * c + 14, y0 + 80), (xb - 12, y0 + 80)], sw=1.8)
    f.arrow([(xb + 8 * c + 14, y0 + 80), (xc - 12, y0 + 80)], sw=1.8)
    f.text((xa + 8 * c + xb) / 2, y0 + 66, "next layer", size=11, colour=MUTED)
    f.text((xb + 8 * c + xc) / 2, y0 + 66, "roll", size=11, colour=MUTED)
    f.text(xa + 80, 22, "(a) layer l", size=14, weight="bold")
    f.text(xb + 80, 22, "(b) layer l + 1", size=14, weight="bold")
    f.text(xc + 80, 22, "(c) cyclic shift", size=14, weight="bold")
    ty = y0 + 8 * c + 24
    notes = [
        ["2 × 2 windows of", "M × M = 4 × 4 patches;", "attention inside", "each window"],
        ["window grid shifted by", "M/2 = 2 patches:", "9 windows A–I", "of uneven sizes"],
        [
            "rolled by (−M/2, −M/2):",
            "again 2 × 2 windows;",
            "a mask keeps letters",
            "apart (then roll back)",
        ],
    ]
    for x0, rows in zip((xa, xb, xc), notes):
        f.lines(x0 + 80, ty + 14, rows, size=12, colour=MUTED)
    return f


def davit() -> Figure:
    f = Figure(
        760,
        530,
        "DaViT's dual attention blocks",
        "A DaViT stage alternates two blocks. Left, the spatial window attention block: a "
        "convolutional position encoding (3 by 3 depthwise convolution, with its own "
        "residual), layer norm, multi-head self-attention among the tokens of each window, a "
        "residual add, another position encoding, layer norm, MLP and residual add. Right, "
        "the channel group attention block has the same layout, but its attention runs over "
        "channels: within each group of channels, every channel is a token whose features "
        "are all the spatial positions. Above each block, a tokens-by-channels matrix shows "
        "what attends to what: rows grouped into windows for the spatial block, columns "
        "grouped into channel groups for the channel block.",
    )
    w = 210
    xs, xch = 60, 480

    def block(x0, title, attn_label):
        cx = x0 + w / 2
        f.text(cx, 16, title, size=14, weight="bold")
        f.rect(x0 - 26, 86, w + 52, 366, fill="#F4F4F4", stroke="#999999", rx=10)
        specs = [
            ("Conv pos. enc. (3×3 dw)", "embedding", 410, 28),
            ("Layer norm", "norm", 360, 28),
            (attn_label, "attention", 296, 42),
            ("Conv pos. enc. (3×3 dw)", "embedding", 226, 28),
            ("Layer norm", "norm", 178, 28),
            ("MLP", "ffn", 130, 28),
        ]
        for label, kind, y, h in specs:
            f.box(x0, y, w, h, label, kind=kind, size=12)
        for y_from, y_to in (
            (410, 389),
            (360, 339),
            (296, 284),
            (265, 255),
            (226, 207),
            (178, 159),
            (130, 118),
        ):
            f.arrow([(cx, y_from), (cx, y_to)])
        f.plus(cx, 274)
        f.plus(cx, 108)
        rx = x0 + w + 14  # residuals, on the right
        for y_from, y_plus in ((399, 274), (216, 108)):
            f.line([(cx, y_from), (rx, y_from)], colour=GREY)
            f.arrow([(rx, y_from), (rx, y_plus), (cx + 10, y_plus)], colour=GREY)

    block(xs, "Spatial window attention block", "Window self-attention\n(tokens in a window)")
    block(xch, "Channel group attention block", "Channel group attention\n(channels in a group)")
    scx, ccx = xs + w / 2, xch + w / 2
    f.arrow([(scx, 492), (scx, 439)])
    f.text(scx, 506, "input: H × W tokens, C channels", size=11, colour=MUTED)
    f.arrow([(scx, 99), (scx, 74), (375, 74), (375, 480), (ccx, 480), (ccx, 439)], sw=1.6)
    f.arrow([(ccx, 99), (ccx, 74), (752, 74)], sw=1.6)
    f.text(748, 64, "output", size=11, anchor="end", colour=MUTED)

    # what attends to what: P tokens (rows) x C channels (columns)
    def matrix(x0, mode, rows_text):
        y0, cw, ch = 28, 10, 6
        for r in range(6):
            for q in range(12):
                g = r // 3 if mode == "spatial" else q // 4
                col = ["orange", "sky", "green"][g]
                f.rect(
                    x0 + q * cw,
                    y0 + r * ch,
                    cw,
                    ch,
                    fill=tint(OKABE_ITO[col], 0.55),
                    stroke="#FFFFFF",
                    sw=0.6,
                    rx=0,
                )
        f.lines(x0 + 12 * cw + 8, y0 + 3 * ch, rows_text, size=11, anchor="start", colour=MUTED)

    matrix(xs - 26, "spatial", ["tokens (rows) attend", "within a window"])
    matrix(xch - 26, "channel", ["channels (columns)", "attend within a group"])
    return f


def vilbert_coattention() -> Figure:
    f = Figure(
        760,
        430,
        "ViLBERT's co-attention Transformer layer",
        "Two streams side by side, image regions on the left and words on the right. In each "
        "stream a multi-head attention layer takes its queries from its own stream and its "
        "keys and values from the other stream, followed by add & norm, a feed-forward "
        "network and add & norm. So the visual stream attends to the words and the "
        "linguistic stream attends to the image regions.",
    )
    w = 220
    xv, xl = 60, 480
    specs = [
        ("Multi-head co-attention", "attention", 262, 40),
        ("Add & norm", "norm", 206, 34),
        ("Feed-forward", "ffn", 148, 34),
        ("Add & norm", "norm", 90, 34),
    ]
    streams = (
        (xv, "Visual stream (image regions)", "H_{V}^{(i)}", "H_{V}^{(i+1)}", "left"),
        (xl, "Linguistic stream (words)", "H_{W}^{(j)}", "H_{W}^{(j+1)}", "right"),
    )
    for x0, name, inp, out, side in streams:
        cx = x0 + w / 2
        f.text(cx, 14, name, size=14, weight="bold")
        for label, kind, y, h in specs:
            f.box(x0, y, w, h, label, kind=kind, size=12)
        f.box(cx - 50, 384, 100, 30, inp, kind="token", size=13)
        f.box(cx - 50, 30, 100, 30, out, kind="token", size=13)
        f.arrow([(cx, 384), (cx, 303)])
        for y_from, y_to in ((262, 241), (206, 183), (148, 125), (90, 61)):
            f.arrow([(cx, y_from), (cx, y_to)])
        sx = x0 - 16 if side == "left" else x0 + w + 16
        edge = x0 if side == "left" else x0 + w
        f.line([(cx, 326), (sx, 326)], colour=GREY)
        f.arrow([(sx, 326), (sx, 223), (edge, 223)], colour=GREY)
        f.line([(cx, 194), (sx, 194)], colour=GREY)
        f.arrow([(sx, 194), (sx, 107), (edge, 107)], colour=GREY)
        qx, anchor = (cx + 8, "start") if side == "left" else (cx - 8, "end")
        f.text(qx, 318, "Q", size=13, anchor=anchor, weight="bold")
    # the co-attention exchange: keys and values from the other stream
    vcx, lcx = xv + w / 2, xl + w / 2
    f.arrow([(lcx, 346), (360, 346), (360, 276), (xv + w + 1, 276)], colour=VERM, sw=1.8)
    f.arrow([(vcx, 362), (400, 362), (400, 290), (xl - 1, 290)], colour=BLUE, sw=1.8, halo=True)
    f.text(318, 264, "K, V", size=12, colour=VERM, weight="bold")
    f.text(442, 278, "K, V", size=12, colour=BLUE, weight="bold")
    f.lines(
        380,
        180,
        ["queries from", "the own stream,", "keys and values", "from the other"],
        size=11,
        colour=MUTED,
    )
    return f


DIAGRAMS = {
    "seq2seq_attention": seq2seq_attention,
    "attention_qkv": attention_qkv,
    "transformer": transformer,
    "bert_vs_gpt": bert_vs_gpt,
    "vit": vit,
    "swin_windows": swin_windows,
    "davit": davit,
    "vilbert_coattention": vilbert_coattention,
}


def render(name: str) -> str:
    """The SVG text of one diagram."""
    return DIAGRAMS[name]().svg()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else FIGURES
    out.mkdir(parents=True, exist_ok=True)
    for name in DIAGRAMS:
        (out / f"{name}.svg").write_text(render(name), encoding="utf-8")
        print(f"wrote {out / name}.svg")


if __name__ == "__main__":
    main()

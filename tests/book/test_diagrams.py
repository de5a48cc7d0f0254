"""The book's architecture diagrams (book/figures/*.svg) are what book/diagrams/build.py draws.

The generator is deterministic, so regenerating must give the committed bytes: edit the code,
run ``.venv/bin/python book/diagrams/build.py`` and commit both. Each SVG must also be
accessible (a title and a description), keep its labels as text, fit the page (≤ 900 px wide,
every label inside the canvas), stay small, and show what its architecture is known by.
"""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIGURES = REPO / "book" / "figures"
SVG = "{http://www.w3.org/2000/svg}"


def _load_build():
    path = REPO / "book" / "diagrams" / "build.py"
    spec = importlib.util.spec_from_file_location("book_diagrams_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _load_build()
NAMES = sorted(BUILD.DIAGRAMS)

#: Labels each diagram must show (what the paper's figure is known by).
MUST_SHOW = {
    "seq2seq_attention": ["h₁", "sₜ₋₁", "eₜ,₁", "aₜ,₁", "cₜ = Σᵢ aₜ,ᵢ hᵢ", "yₜ₋₁"],
    "attention_qkv": ["W", "Q K", "softmax", "mask", "A V"],
    "transformer": [
        "Multi-head self-attention",
        "Masked multi-head attention",
        "Multi-head cross-attention",
        "Add & norm",
        "Feed-forward",
        "positional encoding",
        "Linear",
        "Softmax",
        "K, V",
        "N×",
    ],
    "bert_vs_gpt": ["[MASK]", "[CLS]", "bidirectional", "causal"],
    "vit": ["Linear projection of flattened patches (shared)", "learned [CLS]", "MLP head"],
    "swin_windows": list("ABCDEFGHI") + ["(c) cyclic shift"],
    "davit": ["Window self-attention", "Channel group attention", "Conv pos. enc. (3×3 dw)"],
    "vilbert_coattention": ["Multi-head co-attention", "K, V", "Q", "Feed-forward"],
}


def test_every_diagram_is_committed():
    assert set(BUILD.DIAGRAMS) == set(MUST_SHOW)
    assert sorted(p.stem for p in FIGURES.glob("*.svg")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_regenerating_gives_the_committed_file(name):
    committed = (FIGURES / f"{name}.svg").read_bytes()
    assert BUILD.render(name).encode("utf-8") == committed, (
        f"book/figures/{name}.svg is stale: run .venv/bin/python book/diagrams/build.py"
    )
    assert BUILD.render(name) == BUILD.render(name)  # deterministic


@pytest.mark.parametrize("name", NAMES)
def test_svg_is_accessible_text_and_fits_the_page(name):
    path = FIGURES / f"{name}.svg"
    assert path.stat().st_size < 60_000
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img"
    width, height = float(root.get("width")), float(root.get("height"))
    assert 600 <= width <= 900 and root.get("viewBox") == f"0 0 {root.get('width')} {height:g}"
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert title is not None and len(title.text) > 10
    assert desc is not None and len(desc.text.split()) >= 25
    assert root.get("aria-labelledby") == "title desc"
    texts = root.findall(f".//{SVG}text")
    labels = ["".join(t.itertext()) for t in texts]
    assert len(labels) >= 8
    shown = "\n".join(labels)
    for label in MUST_SHOW[name]:
        assert label in shown, f"{name}: no label {label!r}"
    assert not root.findall(f".//{SVG}image"), "diagrams are vector only"
    # every label lies inside the canvas (estimated width, as the generator estimates it)
    for t, label in zip(texts, labels):
        x, y = float(t.get("x")), float(t.get("y"))
        size = float(t.get("font-size"))
        w = BUILD.text_width(label, size)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor", "start")]
        assert left >= 0 and left + w <= width + 2, f"{name}: {label!r} leaves the canvas"
        assert size <= y <= height, f"{name}: {label!r} leaves the canvas"


def test_layer_kinds_have_one_colour_each():
    # the same kind of layer has the same fill in every diagram, and kinds differ
    fills = {kind: BUILD.kind_colours(kind)[0] for kind in BUILD.KINDS if kind != "plain"}
    assert len(set(fills.values())) == len(fills)
    for name in NAMES:
        svg = (FIGURES / f"{name}.svg").read_text(encoding="utf-8")
        assert "font-family" in svg and "<script" not in svg

"""Tests for course_lib.plot: each helper draws what it should and rejects bad shapes clearly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib import plot  # noqa: E402
from course_lib.train import History  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def softmax_weights(*shape: int) -> torch.Tensor:
    """Attention-like weights that require grad (plots must detach them)."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(*shape, generator=g, requires_grad=True)
    return scores.softmax(dim=-1)


def tick_texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def test_attention_heatmap_labels_and_values():
    w = softmax_weights(3, 5)
    keys, queries = ["the", "cat", "sat", "on", "mat"], ["le", "chat", "assis"]
    ax = plot.attention_heatmap(w, keys, queries, title="cross-attention")
    assert len(ax.figure.axes) == 2  # heatmap + colour bar
    assert tick_texts(ax.get_xticklabels()) == keys
    assert tick_texts(ax.get_yticklabels()) == queries
    assert ax.get_title() == "cross-attention"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("keys", "queries")
    np.testing.assert_allclose(ax.images[0].get_array(), w.detach().numpy(), rtol=1e-6)


def test_attention_heatmap_on_given_axes_and_shapes():
    fig, axes = plt.subplots(1, 2)
    out = plot.attention_heatmap(np.eye(4), ax=axes[1], colorbar=False)
    assert out is axes[1] and len(fig.axes) == 2 and len(axes[0].images) == 0
    # Leading size-1 dims (batch, head) are dropped; bfloat16 is fine.
    plot.attention_heatmap(softmax_weights(1, 1, 4, 4).to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"\(T_q, T_k\), got \(2, 4, 4\).*weights\[0, head\]"):
        plot.attention_heatmap(softmax_weights(2, 4, 4))
    with pytest.raises(ValueError, match="x_labels has 3 labels.*4 keys"):
        plot.attention_heatmap(softmax_weights(4, 4), x_labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="y_labels has 2 labels.*4 queries"):
        plot.attention_heatmap(softmax_weights(4, 4), y_labels=["a", "b"])


def test_attention_grid_layout():
    w = softmax_weights(2, 3, 4, 4)
    tokens = ["a", "b", "c", "d"]
    fig = plot.attention_grid(w, labels=tokens, title="all heads")
    heat_axes = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    assert len(fig.axes) == 2 * 3 + 1 and len(heat_axes) == 6
    grid = np.array(heat_axes).reshape(2, 3)
    assert [ax.get_title() for ax in grid[0]] == ["head 0", "head 1", "head 2"]
    assert [ax.get_ylabel() for ax in grid[:, 0]] == ["layer 0", "layer 1"]
    assert tick_texts(grid[1, 0].get_xticklabels()) == tokens
    np.testing.assert_allclose(grid[1, 2].images[0].get_array(), w[1, 2].detach().numpy())
    # One shared colour scale across panels.
    assert len({ax.images[0].get_clim() for ax in heat_axes}) == 1
    assert fig.get_suptitle() == "all heads"
    fig.canvas.draw()  # the layout engine and colour bar render without error

    assert len(plot.attention_grid(softmax_weights(4, 3, 5)).axes) == 4 + 1  # (H, T, T)
    with pytest.raises(ValueError, match=r"\(L, H, T_q, T_k\)"):
        plot.attention_grid(softmax_weights(2, 2, 2, 3, 3))
    with pytest.raises(ValueError, match="labels"):
        plot.attention_grid(w, labels=tokens, x_labels=tokens)
    with pytest.raises(ValueError, match="x_labels has 2 labels"):
        plot.attention_grid(w, labels=["a", "b"])


def test_positional_encoding_image():
    t, d = 10, 6
    pos = torch.arange(t)[:, None]
    pe = torch.cat([torch.sin(pos / 3.0), torch.cos(pos / 3.0)], dim=1).repeat(1, d // 2)
    ax = plot.positional_encoding_image(pe)
    assert ax.images[0].get_array().shape == (t, d)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("dimension", "position")
    assert ax.images[0].get_clim() == pytest.approx((-1.0, 1.0), abs=1e-3)  # symmetric scale
    with pytest.raises(ValueError, match=r"\(T, d\)"):
        plot.positional_encoding_image(torch.zeros(2, 3, 4))


def test_loss_curves_from_history():
    history = History(
        losses=[3.0, 2.0, 1.5, 1.0, 0.8, 0.7],
        evals=[
            {"epoch": 1, "step": 3, "val loss": 1.8, "accuracy": 0.5},
            {"epoch": 2, "step": 6, "val loss": 1.1, "accuracy": 0.7},
        ],
    )
    ax = plot.loss_curves(history, title="run")
    assert [line.get_label() for line in ax.lines] == ["train loss", "val loss"]
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [3, 6])
    right = [other for other in ax.figure.axes if other is not ax]
    assert len(right) == 1 and right[0].lines[0].get_label() == "accuracy"
    legend = tick_texts(ax.get_legend().get_texts())
    assert legend == ["train loss", "val loss", "accuracy"]
    assert ax.get_title() == "run"
    ax.figure.canvas.draw()


def test_loss_curves_from_dict_and_smoothing():
    ax = plot.loss_curves({"a": [4.0, 3.0, 2.0, 1.0], "b": torch.tensor([1.0, 1.0])}, log_y=True)
    assert [line.get_label() for line in ax.lines] == ["a", "b"] and ax.get_yscale() == "log"
    ax = plot.loss_curves({"loss": [4.0, 2.0, 0.0, 2.0]}, smooth=2)
    assert len(ax.lines) == 2  # faint raw curve + smoothed curve
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [4.0, 3.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="empty"):
        plot.loss_curves(History())
    with pytest.raises(TypeError, match="History or a dict"):
        plot.loss_curves([1.0, 2.0])
    with pytest.raises(ValueError, match="smooth"):
        plot.loss_curves({"a": [1.0]}, smooth=0)


def make_image() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.rand(3, 32, 24, generator=g)  # (C, H, W)


def test_patch_grid_lines_and_numbers():
    image = make_image()
    ax = plot.patch_grid(image, 8)
    assert len(ax.lines) == (32 // 8 - 1) + (24 // 8 - 1)
    assert [t.get_text() for t in ax.texts] == [str(i) for i in range(12)]
    assert ax.get_title() == "12 patches of 8×8"
    shown = ax.images[0].get_array()
    np.testing.assert_allclose(shown, image.permute(1, 2, 0).numpy(), rtol=1e-6)
    # The same picture from an (H, W, C) array.
    ax2 = plot.patch_grid(image.permute(1, 2, 0).numpy(), 8, numbers=False)
    np.testing.assert_allclose(ax2.images[0].get_array(), shown)
    assert not ax2.texts
    with pytest.raises(ValueError, match="32×24 image does not split into 5×5"):
        plot.patch_grid(image, 5)
    with pytest.raises(ValueError, match="channels"):
        plot.patch_grid(torch.zeros(5, 8, 8), 4)


def test_patch_tiles_one_axes_per_patch():
    image = make_image()
    fig = plot.patch_tiles(image, 8)
    assert len(fig.axes) == 12
    # Tile 4 is row 1, column 1 (row-major, as a ViT flattens them).
    tile = fig.axes[4].images[0].get_array()
    np.testing.assert_allclose(tile, image[:, 8:16, 8:16].permute(1, 2, 0).numpy(), rtol=1e-6)


def test_attention_overlay():
    image = make_image()[:, :24, :]  # (3, 24, 24)
    w = softmax_weights(9)
    ax = plot.attention_overlay(image, w, alpha=0.4)
    assert len(ax.images) == 2
    overlay = ax.images[1]
    assert overlay.get_array().shape == (3, 3) and overlay.get_alpha() == 0.4
    assert overlay.get_extent() == pytest.approx([-0.5, 23.5, 23.5, -0.5])
    rectangular = plot.attention_overlay(torch.rand(16, 32), torch.rand(8), grid_size=(2, 4))
    assert rectangular.images[1].get_array().shape == (2, 4)
    plot.attention_overlay(np.random.default_rng(0).random((24, 24)), torch.rand(4, 4))  # grey
    with pytest.raises(ValueError, match=r"length 10.*\[CLS\]"):
        plot.attention_overlay(image, torch.rand(10))
    with pytest.raises(ValueError, match="grid_size"):
        plot.attention_overlay(image, torch.rand(9), grid_size=(2, 4))
    with pytest.raises(ValueError, match="alpha"):
        plot.attention_overlay(image, torch.rand(3, 3), alpha=2.0)


def test_table_renders_rows_and_rejects_ragged_rows():
    md = plot.table(["model", "loss", "note"], [["GRU", 0.123456, "a|b"], ["MLP", 2, "x"]]).data
    lines = md.splitlines()
    assert lines[0] == "| model | loss | note |"
    assert lines[2] == "| GRU | 0.123 | a\\|b |"
    assert lines[3] == "| MLP | 2 | x |"
    with pytest.raises(ValueError, match="row 1 has 2 cells"):
        plot.table(["a", "b", "c"], [[1, 2, 3], [1, 2]])


def test_book_style_sets_svg_and_a_colour_blind_safe_map():
    import matplotlib as mpl

    with mpl.rc_context():
        plot.book_style()
        assert mpl.rcParams["image.cmap"] == "viridis"
        assert mpl.rcParams["figure.dpi"] >= 150
        assert mpl.rcParams["figure.constrained_layout.use"]


def test_log_axes_label_their_ticks_at_the_full_tick_size():
    """After book_style a log axis labels 1, 10, ..., 1k, 1M, 0.01 in plain text: matplotlib's
    default $10^{3}$ draws the exponent at 70 % of the 9 px tick size (6 px on the page)."""
    import io
    import re

    import matplotlib as mpl

    with mpl.rc_context():
        plot.book_style()
        fig, ax = plt.subplots()
        ax.loglog([1, 2e6], [1e-3, 10])
        out = io.StringIO()
        fig.savefig(out, format="svg")
    svg = out.getvalue()
    sizes = {float(x) for x in re.findall(r"font-size: ([\d.]+)px", svg)}
    assert sizes and min(sizes) >= 9, sorted(sizes)
    labels = set(re.findall(r">([^<]{1,6})</text>", svg))
    assert {"1", "1k", "1M", "0.01"} <= labels, labels
    assert [plot.count_label(x) for x in (5, 2500, 3e6, 1.75e11, 0.001)] == [
        "5", "2.5k", "3M", "175B", "0.001",
    ]  # fmt: skip


def test_attention_overlay_colour_blind_safe_with_optional_colorbar():
    ax = plot.attention_overlay(torch.rand(3, 16, 16), torch.rand(4, 4), colorbar=True)
    assert ax.images[-1].get_cmap().name == "viridis"
    assert len(ax.figure.axes) == 2  # the panel and its colorbar
    plt.close(ax.figure)

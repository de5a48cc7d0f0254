"""Plots used throughout the course: attention maps, positional encodings, losses, image patches.

One helper per picture, used by every chapter, so the book's figures look alike:

- `attention_heatmap`: one attention matrix A (T_q × T_k) with token labels, queries as rows;
- `attention_grid`: all heads of all layers (L × H small heatmaps);
- `positional_encoding_image`: the sinusoidal table of Vaswani et al., "Attention Is All You Need"
  (NeurIPS 2017), positions down, dimensions across;
- `loss_curves`: a `course_lib.train.History` or a dict of lists;
- `patch_grid` / `patch_tiles`: an image cut into the P × P patches of Dosovitskiy et al., "An Image
  is Worth 16x16 Words" (ICLR 2021);
- `attention_overlay`: a (h, w) attention map stretched over the image it attends to;
- `book_style`: the look of every figure in the book (SVG output, readable fonts, a
  colour-blind-safe map, no overlapping titles);
- `table`: a list of rows as a table the book renders as HTML.

Inputs may be torch tensors (any device or dtype, with or without grad) or NumPy arrays.
Single-panel functions take an optional ``ax`` and return the `Axes`; multi-panel ones return the
`Figure`. Nothing calls ``plt.show()``; pyplot is imported only when a figure is made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "attention_grid",
    "attention_heatmap",
    "attention_overlay",
    "book_style",
    "loss_curves",
    "patch_grid",
    "patch_tiles",
    "positional_encoding_image",
    "table",
]

ArrayLike = torch.Tensor | np.ndarray | Sequence


def _to_numpy(x: ArrayLike, name: str) -> np.ndarray:
    """A float NumPy copy of a tensor (detached, on the CPU) or array."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    try:
        return np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a tensor or array of numbers, got {type(x)}") from err


def _squeeze_to(x: np.ndarray, ndim: int, name: str, expected: str, hint: str = "") -> np.ndarray:
    """Drop leading size-1 dims until ``x`` has ``ndim`` dims, or raise a helpful error."""
    while x.ndim > ndim and x.shape[0] == 1:
        x = x[0]
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {expected}, got {tuple(x.shape)}{hint}")
    return x


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def _check_labels(labels: Sequence[str] | None, n: int, name: str, axis: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(t) for t in labels]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the weights have {n} {axis}")
    return labels


# --------------------------------------------------------------------------------------- attention


def book_style(*, svg: bool = True) -> None:
    """Set the figure style the book uses on every page.

    Figures are drawn as SVG (sharp on any screen; rasters inside them, such as heatmaps, keep
    their pixels), at 150 dpi where a raster is made, with fonts that stay readable when the page
    shrinks a wide figure, a colour-blind-safe default map (viridis) and constrained layout so
    that titles and labels never overlap. A log axis labels its ticks 1, 10, 100, 1k, 1M, 1B
    (matplotlib's $10^3$ draws the exponent at 70 % of the tick size, 6 px on the page).
    ``svg=False`` keeps PNG output (e.g. for a figure with very many points).
    """
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.dpi": 150,
            "savefig.dpi": 150,
            "figure.figsize": (5.0, 3.5),
            "figure.constrained_layout.use": True,
            "font.size": 10,
            "axes.titlesize": 10,
            "axes.labelsize": 10,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": 9,
            "image.cmap": "viridis",
            "axes.prop_cycle": mpl.cycler(
                color=["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442"]
            ),
            "svg.fonttype": "none",
        }
    )
    _register_readable_log_scale()
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside Jupyter: nothing to configure
        return
    set_matplotlib_formats("svg" if svg else "png")


def count_label(x: float) -> str:
    """A tick value as people write counts and sizes: 1, 10, 100, 1k, 25k, 1M, 1B, 0.01."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= size:
            return f"{x / size:g}{suffix}"
    return f"{x:g}"


def _register_readable_log_scale() -> None:
    """Make ``set_xscale("log")``, ``loglog`` and ``semilogx`` label ticks with ``count_label``
    at the full tick size (base 10 only; the locators are matplotlib's)."""
    from matplotlib import scale, ticker

    class CountFormatter(ticker.LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return count_label(x)

    class ReadableLogScale(scale.LogScale):
        name = "log"

        def __init__(self, *args, **kwargs):  # matplotlib passes `axis` or not, by version
            super().__init__(*args, **kwargs)

        def set_default_locators_and_formatters(self, axis):
            super().set_default_locators_and_formatters(axis)
            if self.base == 10:
                axis.set_major_formatter(CountFormatter(self.base))
                axis.set_minor_formatter(
                    CountFormatter(self.base, labelOnlyBase=self.subs is not None)
                )

    scale.register_scale(ReadableLogScale)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, digits: int = 3) -> Any:
    """Rows of results as a Markdown table, rendered as HTML by the book and by Jupyter.

    Floats are shown with ``digits`` significant digits; everything else with ``str``. Returns an
    ``IPython.display.Markdown`` object (display it, or leave it as a cell's last expression).

    >>> table(["model", "loss"], [["GRU", 0.12345]]).data.splitlines()[2]
    '| GRU | 0.123 |'
    """
    from IPython.display import Markdown

    header = [str(h) for h in header]
    if not header:
        raise ValueError("table: header is empty; pass one column name per column")

    def cell(value: Any) -> str:
        text = f"{value:.{digits}g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(header):
            raise ValueError(
                f"table: row {i} has {len(row)} cells but the header has {len(header)} columns; "
                "give every row one cell per column"
            )
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return Markdown("\n".join(lines))


def attention_heatmap(
    weights: ArrayLike,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin: float | None = 0.0,
    vmax: float | None = None,
) -> Axes:
    """Draw one attention matrix: row i is query i, column j is key j, colour A[i, j].

    Args:
        weights: (T_q, T_k); leading size-1 dims (batch, head) are dropped.
        x_labels: T_k key tokens (columns). y_labels: T_q query tokens (rows).
    Returns:
        The Axes.
    """
    a = _squeeze_to(
        _to_numpy(weights, "weights"),
        2,
        "weights",
        "(T_q, T_k)",
        "; select one matrix first, e.g. weights[0, head]",
    )
    t_q, t_k = a.shape
    x_labels = _check_labels(x_labels, t_k, "x_labels", "keys (columns)")
    y_labels = _check_labels(y_labels, t_q, "y_labels", "queries (rows)")
    # at most 10 in wide: a wider figure is shrunk to the book's column (8 in at 1400 px) and its
    # 9 pt tick labels fall below 9 px
    width = min(10.0, max(3.0, 0.35 * t_k + 1.5))
    ax = _new_axes(ax, figsize=(width, min(8.0, max(2.5, 0.35 * t_q + 1.0))))
    image = ax.imshow(a, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    if x_labels is not None:
        ax.set_xticks(range(t_k), x_labels, rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(t_q), y_labels)
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_grid(
    weights: ArrayLike,
    labels: Sequence[str] | None = None,
    *,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    panel_size: float = 2.0,
) -> Figure:
    """All heads of all layers: an L × H grid of attention maps sharing one colour scale.

    Args:
        weights: (L, H, T_q, T_k); (H, T_q, T_k) is drawn as one layer.
        labels: tokens for both axes (self-attention, T_q == T_k); or give ``x_labels`` (keys) and
            ``y_labels`` (queries) separately. Tick labels appear on the outer panels only.
    Returns:
        The Figure (L * H heatmap axes plus one colour-bar axis).
    """
    import matplotlib.pyplot as plt

    w = _to_numpy(weights, "weights")
    if w.ndim == 3:
        w = w[None]
    w = _squeeze_to(w, 4, "weights", "(L, H, T_q, T_k) or (H, T_q, T_k)")
    n_layers, n_heads, t_q, t_k = w.shape
    if labels is not None:
        if x_labels is not None or y_labels is not None:
            raise ValueError("give either labels, or x_labels/y_labels, not both")
        x_labels = y_labels = labels
    x_labels = _check_labels(x_labels, t_k, "x_labels", "keys (columns)")
    y_labels = _check_labels(y_labels, t_q, "y_labels", "queries (rows)")

    fig, axes = plt.subplots(
        n_layers,
        n_heads,
        squeeze=False,
        sharex=True,
        sharey=True,
        # at most 10 in wide, so that the book never shrinks the tick labels below 9 px
        figsize=(min(10.0, panel_size * n_heads + 1.0), panel_size * n_layers + 0.5),
        layout="constrained",
    )
    vmax = float(w.max()) if w.size else 1.0
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
            # the style's 9 pt: readable where the book shows the grid (at least 9 px)
            ax.set_xticks(range(t_k), x_labels or [""] * t_k, rotation=90)
            ax.set_yticks(range(t_q), y_labels or [""] * t_q)
            ax.tick_params(labelbottom=layer == n_layers - 1, labelleft=head == 0)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def attention_overlay(
    image: ArrayLike,
    weights: ArrayLike,
    ax: Axes | None = None,
    *,
    grid_size: tuple[int, int] | None = None,
    alpha: float = 0.5,
    cmap: str = "viridis",
    title: str | None = None,
    colorbar: bool = False,
) -> Axes:
    """Show where a query looks in an image: the attention map stretched over the image.

    Args:
        image: (C, H, W) tensor, (H, W, C) array or (H, W) grey image.
        weights: (h, w) attention over the h × w patch grid, or flat (h * w,); a flat map is taken
            as square unless ``grid_size=(h, w)`` is given. Drop a [CLS] entry first.
        alpha: opacity of the attention layer.
        colorbar: draw this panel's colorbar for the attention weights; for a grid of panels
            share one instead (``fig.colorbar(axes[0].images[-1], ax=axes)``).
    Returns:
        The Axes.
    """
    img = _image_hwc(image)
    w = _to_numpy(weights, "weights")
    if w.ndim == 1 or grid_size is not None:
        flat = w.reshape(-1)
        if grid_size is None:
            side = math.isqrt(flat.size)
            if side * side != flat.size:
                raise ValueError(
                    f"flat weights of length {flat.size} are not a square grid; pass "
                    "grid_size=(h, w), or drop the [CLS] entry (e.g. weights[1:])"
                )
            grid_size = (side, side)
        if grid_size[0] * grid_size[1] != flat.size:
            raise ValueError(f"grid_size {grid_size} does not match {flat.size} weights")
        w = flat.reshape(grid_size)
    w = _squeeze_to(w, 2, "weights", "(h, w) or flat (h * w,)")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    height, width = img.shape[:2]
    ax = _new_axes(ax, figsize=(4, 4))
    _show_image(ax, img)
    # Bilinear upsampling of the coarse map to the image's extent.
    overlay = ax.imshow(
        w,
        cmap=cmap,
        alpha=alpha,
        extent=(-0.5, width - 0.5, height - 0.5, -0.5),
        interpolation="bilinear",
    )
    ax.set_axis_off()
    if colorbar:
        ax.figure.colorbar(overlay, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    if title:
        ax.set_title(title)
    return ax


# ------------------------------------------------------------------------------ positions, losses


def positional_encoding_image(
    pe: ArrayLike, ax: Axes | None = None, *, title: str | None = None, cmap: str = "RdBu"
) -> Axes:
    """Draw a positional-encoding table: position down the rows, embedding dimension across.

    Args:
        pe: (T, d); a leading batch dim of 1 is dropped.
    """
    table = _squeeze_to(_to_numpy(pe, "pe"), 2, "pe", "(T, d)")
    ax = _new_axes(ax, figsize=(6, 4))
    limit = float(np.abs(table).max()) or 1.0
    image = ax.imshow(
        table, cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
    )
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title or "positional encoding")
    ax.figure.colorbar(image, ax=ax)
    return ax


def _moving_average(values: np.ndarray, window: int) -> np.ndarray:
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (cumulative[1:] - cumulative[np.arange(1, len(values) + 1) - counts]) / counts


def loss_curves(
    history: Any,
    ax: Axes | None = None,
    *,
    smooth: int | None = None,
    log_y: bool = False,
    title: str | None = None,
) -> Axes:
    """Plot training curves.

    Args:
        history: a `course_lib.train.History` (training loss per step, and each evaluation metric
            at the step it was measured; metrics whose name has no "loss" in it go on a right-hand
            axis), or a dict ``{name: list of values}`` (one line each, against the index).
        smooth: moving-average window; the raw curve stays, faint, behind the smoothed one.
    Returns:
        The (left) Axes.
    """
    if smooth is not None and (not isinstance(smooth, int) or smooth < 1):
        raise ValueError(f"smooth must be a positive int window, got {smooth!r}")
    if hasattr(history, "losses") and hasattr(history, "evals"):
        series = {"train loss": (np.arange(1, len(history.losses) + 1), history.losses)}
        metric_names = [k for e in history.evals for k in e if k not in ("epoch", "step")]
        for name in dict.fromkeys(metric_names):
            points = [(e["step"], e[name]) for e in history.evals if name in e]
            steps, values = zip(*points)
            series[name] = (np.asarray(steps), values)
        x_label = "step"
    elif isinstance(history, Mapping):
        series = {str(k): (np.arange(1, len(v) + 1), v) for k, v in history.items()}
        x_label = "step"
    else:
        raise TypeError(
            f"loss_curves needs a History or a dict of lists, got {type(history).__name__}"
        )
    series = {k: (x, _to_numpy(list(v), k).reshape(-1)) for k, (x, v) in series.items() if len(v)}
    if not series:
        raise ValueError("nothing to plot: the history is empty")

    ax = _new_axes(ax, figsize=(6, 3.5))
    right = None
    for index, (name, (x, y)) in enumerate(series.items()):
        on_right = hasattr(history, "evals") and name != "train loss" and "loss" not in name.lower()
        if on_right and right is None:
            right = ax.twinx()
            right.set_ylabel("metric")
        target = right if on_right else ax
        color = f"C{index}"
        marker = "o" if len(y) <= 50 and name != "train loss" else None
        if smooth and smooth > 1 and len(y) > smooth:
            target.plot(x, y, color=color, alpha=0.25)
            y = _moving_average(y, smooth)
        target.plot(x, y, color=color, marker=marker, label=name)
    handles = ax.get_legend_handles_labels()
    if right is not None:
        extra = right.get_legend_handles_labels()
        handles = (handles[0] + extra[0], handles[1] + extra[1])
    ax.legend(*handles, loc="best")
    ax.set_xlabel(x_label)
    ax.set_ylabel("loss")
    if log_y:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    return ax


# ------------------------------------------------------------------------------------------ images


def _image_hwc(image: ArrayLike) -> np.ndarray:
    """(H, W), (C, H, W) or (H, W, C), C in {1, 3, 4} -> (H, W) or (H, W, C) scaled to [0, 1]."""
    img = _to_numpy(image, "image")
    if img.ndim == 4 and img.shape[0] == 1:
        img = img[0]
    if img.ndim == 3:
        channels_first = img.shape[0] in (1, 3, 4) and (
            isinstance(image, torch.Tensor) or img.shape[-1] not in (1, 3, 4)
        )
        if channels_first:
            img = np.moveaxis(img, 0, -1)
        if img.shape[-1] not in (1, 3, 4):
            raise ValueError(
                f"image must be (H, W), (C, H, W) or (H, W, C) with 1, 3 or 4 channels, got "
                f"{tuple(np.shape(image))}"
            )
        if img.shape[-1] == 1:
            img = img[..., 0]
    elif img.ndim != 2:
        raise ValueError(
            f"image must be (H, W), (C, H, W) or (H, W, C), got shape {tuple(np.shape(image))}"
        )
    low, high = float(img.min()), float(img.max())
    if low < 0.0 or high > 1.0:  # e.g. normalized inputs or 0..255: rescale for display
        img = (img - low) / (high - low or 1.0)
    return img


def _show_image(ax: Axes, img: np.ndarray) -> None:
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0)


def _patch_counts(img: np.ndarray, patch_size: int) -> tuple[int, int]:
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"patch_size must be a positive int, got {patch_size!r}")
    height, width = img.shape[:2]
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"a {height}×{width} image does not split into {patch_size}×{patch_size} patches; "
            "crop or resize it to a multiple of patch_size"
        )
    return height // patch_size, width // patch_size


def patch_grid(
    image: ArrayLike,
    patch_size: int,
    ax: Axes | None = None,
    *,
    numbers: bool = True,
    title: str | None = None,
) -> Axes:
    """The image with grid lines between its P × P patches, numbered in the order a ViT reads them.

    Args:
        image: (C, H, W) tensor, (H, W, C) array or (H, W); H and W multiples of ``patch_size``.
    Returns:
        The Axes.
    """
    img = _image_hwc(image)
    rows, cols = _patch_counts(img, patch_size)
    ax = _new_axes(ax, figsize=(4, 4))
    _show_image(ax, img)
    for r in range(1, rows):
        ax.axhline(r * patch_size - 0.5, color="white", linewidth=1)
    for c in range(1, cols):
        ax.axvline(c * patch_size - 0.5, color="white", linewidth=1)
    if numbers:
        for r in range(rows):
            for c in range(cols):
                ax.text(
                    (c + 0.5) * patch_size - 0.5,
                    (r + 0.5) * patch_size - 0.5,
                    str(r * cols + c),
                    color="yellow",
                    ha="center",
                    va="center",
                    fontsize=8,
                )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or f"{rows * cols} patches of {patch_size}×{patch_size}")
    return ax


def patch_tiles(image: ArrayLike, patch_size: int, *, gap: float = 0.1) -> Figure:
    """The image's patches as separate tiles, one axes per patch in row-major (token) order."""
    import matplotlib.pyplot as plt

    img = _image_hwc(image)
    rows, cols = _patch_counts(img, patch_size)
    fig, axes = plt.subplots(
        rows,
        cols,
        squeeze=False,
        figsize=(0.8 * cols + 0.5, 0.8 * rows + 0.5),
        gridspec_kw={"wspace": gap, "hspace": gap},
    )
    p = patch_size
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            _show_image(ax, img[r * p : (r + 1) * p, c * p : (c + 1) * p])
            ax.set_xticks([])
            ax.set_yticks([])
    return fig

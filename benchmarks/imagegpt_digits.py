"""ImageGPT on the 8x8 digits: likelihood in bits per pixel, and completions of the lower half.

Chen et al. 2020, "Generative Pretraining from Pixels". Pixels are quantised to a fixed grey palette
(``--levels`` evenly spaced grey values), each image becomes 64 tokens in raster order, and the
``imagegpt-digits`` preset is trained briefly on the training split. On the test split the script
prints the negative log-likelihood in bits per pixel against two baselines measured in the same run:

- uniform: every palette colour equally likely, ``log2(K)`` bits;
- independent pixels: each of the 64 positions with its own colour histogram from the training
  split (add-one smoothing) and no dependence between pixels, the best a model without context
  can do.

It also saves a figure (``--out``): for some test digits, the original (quantised), the upper half
that is given, and several sampled completions of the lower half.

The training budget is counted in CPU seconds of this process with one thread by default
(``--clock cpu --threads 1``), which approximates the wall time of an idle machine even on a
shared one; ``--clock wall`` counts wall-clock time.

    .venv/bin/python benchmarks/imagegpt_digits.py
    .venv/bin/python benchmarks/imagegpt_digits.py --seconds 30 --out /tmp/completions.png
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from course_lib.data.digits import DigitsDataset
from course_lib.gpu import count_parameters, seed_everything
from course_lib.models import create
from course_lib.models.imagegpt import bits_per_pixel, dequantize, grey_palette, quantize
from course_lib.train import fit


def independent_pixels_bits(train: torch.Tensor, test: torch.Tensor, K: int) -> float:
    """Bits per pixel of test tokens ``(N, T)`` under per-position histograms of ``train``."""
    counts = torch.ones(train.shape[1], K)  # (T, K), add-one smoothing
    counts.scatter_add_(1, train.T, torch.ones_like(train.T, dtype=counts.dtype))
    log_probs = (counts / counts.sum(dim=1, keepdim=True)).log2()  # (T, K)
    return float(-log_probs.gather(1, test.T).mean())


def train_for(model, loader, *, lr: float, seconds: float, clock: str, chunk: int = 20):
    """AdamW with ``fit`` in chunks of ``chunk`` steps until ``seconds`` of ``clock`` have passed.

    Returns (steps, seconds used).
    """
    now = time.process_time if clock == "cpu" else time.perf_counter
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start, steps = now(), 0
    with tqdm(total=round(seconds), desc=f"{clock} s", leave=False) as bar:
        while now() - start < seconds:
            history = fit(
                model,
                loader,
                loss_fn=lambda m, batch: m.loss(batch[0]),
                optimizer=optimizer,
                max_steps=chunk,
                clip_grad=1.0,
                device="cpu",
                progress=False,
            )
            steps += history.steps
            bar.update(min(round(now() - start), round(seconds)) - bar.n)
            bar.set_postfix(loss=f"{history.losses[-1]:.3f}", steps=steps)
    return steps, now() - start


def save_completions(model, tokens: torch.Tensor, palette, path: Path, *, samples: int, seed: int):
    """Figure: rows are test digits; columns original, given upper half, ``samples`` completions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = model.config
    half = cfg.seq_len // 2
    generator = torch.Generator().manual_seed(seed)
    completions = [model.complete(tokens[:, :half], generator=generator) for _ in range(samples)]
    n = tokens.shape[0]
    cmap = plt.get_cmap("gray").with_extremes(bad="#e8a0a0")  # hidden pixels in pale red
    fig, axes = plt.subplots(n, samples + 2, figsize=(1.2 * (samples + 2), 1.2 * n), squeeze=False)
    for i in range(n):
        given = dequantize(tokens[i : i + 1], palette, height=cfg.height, width=cfg.width)[0, 0]
        masked = given.clone()
        masked[cfg.height // 2 :] = float("nan")  # the hidden lower half
        panels = [given, masked] + [
            dequantize(c[i : i + 1], palette, height=cfg.height, width=cfg.width)[0, 0]
            for c in completions
        ]
        for j, (ax, image) in enumerate(zip(axes[i], panels)):
            ax.imshow(image.numpy(), cmap=cmap, vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(["original", "given"][j] if j < 2 else f"sample {j - 1}", fontsize=8)
    fig.suptitle("ImageGPT: the lower half sampled from the upper half", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=8, help="grey levels in the palette (K)")
    parser.add_argument("--seconds", type=float, default=60.0, help="training budget")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="budget clock")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--samples", type=int, default=4, help="completions per digit in the figure"
    )
    parser.add_argument("--digits", type=int, default=8, help="digits (rows) in the figure")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build_artifacts/imagegpt_digits_completions.png"),
        help="where to save the completion figure",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    seed_everything(args.seed)
    palette = grey_palette(args.levels)  # (K, 1)
    train_images = DigitsDataset(split="train", seed=args.seed).images  # (N, 1, 8, 8)
    test_images = DigitsDataset(split="test", seed=args.seed).images
    train = quantize(train_images, palette)  # (N, 64)
    test = quantize(test_images, palette)

    model = create("imagegpt-digits", palette_size=args.levels)
    generator = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(
        TensorDataset(train), batch_size=args.batch_size, shuffle=True, generator=generator
    )
    steps, used = train_for(model, loader, lr=args.lr, seconds=args.seconds, clock=args.clock)
    model.eval()

    uniform = math.log2(args.levels)
    independent = independent_pixels_bits(train, test, args.levels)
    rows = [
        ("uniform palette", uniform),
        ("independent pixels", independent),
        ("ImageGPT (train split)", bits_per_pixel(model, train)),
        ("ImageGPT (test split)", bits_per_pixel(model, test)),
    ]
    print(
        f"\ndigits {tuple(train_images.shape[-2:])}, palette of {args.levels} grey levels, "
        f"{len(train)} train / {len(test)} test images"
    )
    print(
        f"ImageGPT: {count_parameters(model):,} parameters, {steps} steps "
        f"({steps * args.batch_size / len(train):.1f} epochs) in {used:.1f} s "
        f"({args.clock} clock, {args.threads} thread(s))\n"
    )
    header = f"{'model':<24} {'bits/pixel':>10} {'vs uniform':>10} {'vs independent':>14}"
    print(header)
    print("-" * len(header))
    for name, bits in rows:
        print(f"{name:<24} {bits:>10.3f} {bits / uniform:>10.2f} {bits / independent:>14.2f}")

    # Completion accuracy of the lower half: greedy completion vs the true pixels.
    half = model.config.seq_len // 2
    greedy = model.complete(test[:, :half], greedy=True)
    agree = float((greedy[:, half:] == test[:, half:]).float().mean())
    mode = torch.mode(train, dim=0).values  # (T,) most frequent colour at each position
    agree_mode = float((mode[half:] == test[:, half:]).float().mean())
    print(
        f"\nlower half, pixels equal to the true digit's: greedy completion {agree:.3f}, "
        f"most frequent colour per position {agree_mode:.3f}"
    )

    shown = test[torch.linspace(0, len(test) - 1, args.digits).long()]
    save_completions(model, shown, palette, args.out, samples=args.samples, seed=args.seed)
    print(f"completion figure: {args.out}")


if __name__ == "__main__":
    main()

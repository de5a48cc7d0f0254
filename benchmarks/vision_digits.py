"""Vision transformers on scikit-learn's 8x8 digits: ViT, Swin and DaViT against a small CNN.

Part 1 (outcome): each model trains for a fixed budget (60 s by default) on the stratified 80%
training split of ``course_lib.data.digits`` and is scored on the held-out 20%. Target: every
transformer reaches >= 97% test accuracy within 60 s of training on 2 CPU cores. The CNN, trained
the same way in the same run, is the baseline the ratios refer to. On a machine shared with other
jobs, ``--clock cpu --threads 1`` counts the budget in CPU seconds this process actually received
on one core (a stricter budget than 2 idle cores for 60 s); the table shows both clocks.

Part 2 (inductive bias): a small CNN and a ViT train on the first ``n`` training images, for the
same number of optimizer steps and without augmentation, for several ``n``. A convolution already
knows that nearby pixels belong together and that a stroke means the same wherever it is; the ViT
has to learn this from the data, so it needs more of it (Dosovitskiy et al. 2021, Sec. 4.3, at a
much larger scale).

    .venv/bin/python benchmarks/vision_digits.py                 # about 8 minutes on 2 idle cores
    .venv/bin/python benchmarks/vision_digits.py --clock cpu --threads 1   # on a busy machine
    .venv/bin/python benchmarks/vision_digits.py --seconds 20 --sizes 50 200 --steps 200
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from course_lib.data.digits import load_digits_tensors, stratified_split
from course_lib.gpu import count_parameters, seed_everything
from course_lib.models import create

# Training recipe per model: image side (the 8x8 digits, or upsampled to 16x16), peak learning
# rate, and the largest random translation in pixels of that image. The transformers read 16x16
# digits in 4x4 patches (a 4x4 token map; Swin and DaViT use windows of 2x2 tokens), where a
# 1-pixel translation is half a pixel of the digit. (On the raw 8x8 digits in 2x2 patches, a
# whole-pixel shift changes every patch, and the ViT learns much more slowly.)
RECIPES: dict[str, dict] = {
    "cnn": {"size": 8, "lr": 3e-3, "shift": 1},
    "vit-digits": {"size": 16, "lr": 3e-3, "shift": 1},
    "swin-digits": {"size": 16, "lr": 3e-3, "shift": 1},
    "davit-digits": {"size": 16, "lr": 3e-3, "shift": 1},
}


class SmallCNN(nn.Module):
    """Baseline: three 3x3 convolutions with ReLU, two 2x2 max-pools, global average, linear."""

    def __init__(self, *, in_channels: int = 1, width: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8 -> 4
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 4 -> 2
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.features(images).mean(dim=(2, 3)))


def random_shift(images: Tensor, max_shift: int) -> Tensor:
    """Translate each image (B, 1, S, S) by up to ``max_shift`` pixels each way, zero fill."""
    if max_shift == 0:
        return images
    B, _, S, _ = images.shape
    padded = F.pad(images, (max_shift,) * 4)
    dy, dx = torch.randint(0, 2 * max_shift + 1, (2, B)).tolist()
    return torch.stack([padded[i, :, dy[i] : dy[i] + S, dx[i] : dx[i] + S] for i in range(B)])


def accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        predictions = torch.cat([model(x).argmax(-1) for x in images.split(256)])
    return (predictions == labels).float().mean().item()


def train(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    *,
    seconds: float | None = None,
    steps: int | None = None,
    clock: str = "wall",
    lr: float = 3e-3,
    shift: int = 0,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, float]:
    """AdamW, 50 warm-up steps, cosine decay to zero over the budget (seconds or steps).

    ``clock="wall"`` counts wall-clock seconds; ``clock="cpu"`` counts the CPU seconds this process
    received (``time.process_time``), which other processes on a busy machine cannot eat. Each
    training image is translated by up to ``shift`` pixels. Returns steps, wall and CPU seconds.
    """
    if (seconds is None) == (steps is None):
        raise ValueError("give exactly one budget: seconds or steps")
    seed_everything(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    now = time.perf_counter if clock == "wall" else time.process_time
    start, wall0, cpu0 = now(), time.perf_counter(), time.process_time()
    step, done = 0, 0.0
    bar = tqdm(total=100, desc=type(model).__name__, unit="%", leave=False)
    model.train()
    while done < 1.0:
        for index in torch.randperm(len(labels), generator=generator).split(batch_size):
            done = step / steps if steps else (now() - start) / seconds
            if done >= 1.0:
                break
            for group in optimizer.param_groups:  # warm-up, then cosine to zero at the budget
                group["lr"] = lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * done))
            x = random_shift(images[index], shift)
            loss = F.cross_entropy(model(x), labels[index], label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            bar.update(int(100 * done) - bar.n)
    bar.close()
    return {"steps": step, "wall": time.perf_counter() - wall0, "cpu": time.process_time() - cpu0}


def build(name: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return SmallCNN() if name == "cnn" else create(name)


def describe(model: nn.Module) -> str:
    """Patch and window sizes of a model, for the table."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return "3x3 conv"
    window = f", window {cfg.window_size}" if hasattr(cfg, "window_size") else ""
    return f"patch {cfg.patch_size}{window}"


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def outcome_table(args: argparse.Namespace) -> None:
    images = {size: load_digits_tensors(size=size)[0] for size in (8, 16)}
    labels = load_digits_tensors()[1]
    train_idx, test_idx = stratified_split(labels, seed=args.seed)
    print(f"before part 1: {load_average()}", flush=True)
    rows = []
    for name in tqdm(list(RECIPES), desc="part 1"):
        model, recipe = build(name, args.seed), RECIPES[name]
        x = images[recipe["size"]]
        run = train(
            model, x[train_idx], labels[train_idx], seconds=args.seconds, clock=args.clock,
            lr=recipe["lr"], shift=recipe["shift"], seed=args.seed,
        )  # fmt: skip
        acc = accuracy(model, x[test_idx], labels[test_idx])
        rows.append((name, count_parameters(model), describe(model), run, acc))
        tqdm.write(f"  {name}: {acc:.2%} after {run['steps']} steps")
    print(f"after part 1: {load_average()}")
    base = rows[0][-1]
    print(f"\nPart 1: {len(train_idx)} training / {len(test_idx)} test digits, "
          f"{args.seconds:.0f} s of training each on the {args.clock} clock, "
          f"{torch.get_num_threads()} torch thread(s)")  # fmt: skip
    print(f"{'model':<14}{'params':>9}  {'px, tokens':<21}{'shift':>6}{'steps':>7}{'wall s':>8}"
          f"{'cpu s':>7}{'test acc':>10}{'vs CNN':>8}{'>= 97%':>8}")  # fmt: skip
    for name, params, tokens, run, acc in rows:
        target = "-" if name == "cnn" else ("yes" if acc >= 0.97 else "NO")
        shift, steps, wall, cpu = RECIPES[name]["shift"], run["steps"], run["wall"], run["cpu"]
        tokens = f"{RECIPES[name]['size']}, {tokens}"
        print(f"{name:<14}{params:>9,}  {tokens:<21}{shift:>6}{steps:>7}{wall:>8.1f}{cpu:>7.1f}"
              f"{acc:>10.2%}{acc / base:>8.3f}{target:>8}")  # fmt: skip


def small_data_table(args: argparse.Namespace) -> None:
    labels = load_digits_tensors()[1]
    images = {size: load_digits_tensors(size=size)[0] for size in (8, 16)}
    train_idx, test_idx = stratified_split(labels, seed=args.seed)
    order = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(1))]
    results: dict[str, list[float]] = {"cnn": [], "vit-digits": []}
    runs = [(n, name) for n in args.sizes for name in results]
    for n, name in tqdm(runs, desc="part 2"):
        subset, model, recipe = order[:n], build(name, args.seed), RECIPES[name]
        x = images[recipe["size"]]
        train(
            model, x[subset], labels[subset], steps=args.steps, lr=recipe["lr"],
            batch_size=min(64, n), seed=args.seed,
        )  # fmt: skip
        results[name].append(accuracy(model, x[test_idx], labels[test_idx]))
    params = {name: count_parameters(build(name, 0)) for name in results}
    print(f"\nPart 2: test accuracy ({len(test_idx)} digits) after {args.steps} steps on the "
          f"first n training digits, no augmentation; CNN {params['cnn']:,} parameters, "
          f"ViT {params['vit-digits']:,}")  # fmt: skip
    print(f"{'n train':>8}{'CNN':>9}{'ViT':>9}{'ViT / CNN':>11}")
    for i, n in enumerate(args.sizes):
        cnn, vit = results["cnn"][i], results["vit-digits"][i]
        print(f"{n:>8}{cnn:>9.2%}{vit:>9.2%}{vit / cnn:>11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="training budget per model")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500, 1437])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per part-2 run")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall",
        help="count the part-1 budget in wall-clock or in this process's CPU seconds",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", choices=["outcome", "small-data"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.skip != "outcome":
        outcome_table(args)
    if args.skip != "small-data":
        small_data_table(args)


if __name__ == "__main__":
    main()

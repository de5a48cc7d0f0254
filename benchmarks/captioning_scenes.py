"""Captioning the synthetic scenes: RNN with attention (Xu et al. 2015) vs a transformer decoder.

Trains ``caption-rnn-attn`` and ``caption-transformer`` for a fixed time budget each on scenes from
``course_lib.data.scenes`` and prints, on held-out scenes:

- exact match: the greedy caption equals the reference word for word;
- true caption: the greedy caption is true of the image (``caption_is_true``) and names every
  object, whatever its word order;
- attention in box: for every colour or shape word of the reference caption (teacher forcing),
  whether the arg-max cell of the attention used to predict that word has its centre inside the
  box of the object the word names; the chance rate (a uniformly random peak) is measured on the
  same words.

By default the scene generator chains the objects of a caption in random order ("red circle left of
blue square" and "blue square right of red circle" describe the same image), which no model can
guess; the scenes here use ``caption_order="left_to_right"`` (objects by box centre), which makes
the caption a function of the image and exact match reachable.

Both models get the same training budget, by default in CPU seconds of this process with one
thread (``--clock cpu --threads 1``), which approximates the wall time on an idle machine even when
the machine is shared; ``--clock wall`` budgets wall-clock time instead.

    .venv/bin/python benchmarks/captioning_scenes.py            # 2 x 60 s of training
    .venv/bin/python benchmarks/captioning_scenes.py --seconds 20 --train 1000
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from course_lib.data.scenes import (
    COLOURS,
    SHAPES,
    Scene,
    SceneDataset,
    caption_is_true,
    scene_vocab,
)
from course_lib.gpu import count_parameters, seed_everything
from course_lib.models import create
from course_lib.models.captioning import box_cell_mask, caption_loss
from course_lib.train import fit


def scenes(n: int, seed: int, size: int) -> SceneDataset:
    return SceneDataset(n, seed, size=size, caption_order="left_to_right")


def loss_fn(model, batch):
    caption = batch["caption"]  # (B, T): BOS, words, EOS, padding
    logits = model(batch["image"], caption[:, :-1])  # (B, T-1, V)
    return caption_loss(logits, caption[:, 1:], pad_id=0)


def train_for(model, loader, *, lr: float, seconds: float, clock: str, chunk: int = 20):
    """AdamW with ``fit`` in chunks of ``chunk`` steps until ``seconds`` of ``clock`` have passed.

    Returns (steps, seconds used, last loss).
    """
    now = time.process_time if clock == "cpu" else time.perf_counter
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start, steps, loss = now(), 0, float("nan")
    with tqdm(total=round(seconds), desc=f"{clock} s", leave=False) as bar:
        while now() - start < seconds:
            history = fit(
                model,
                loader,
                loss_fn=loss_fn,
                optimizer=optimizer,
                max_steps=chunk,
                clip_grad=1.0,
                device="cpu",
                progress=False,
            )
            steps, loss = steps + history.steps, history.losses[-1]
            bar.update(min(round(now() - start), round(seconds)) - bar.n)
            bar.set_postfix(loss=f"{loss:.3f}", steps=steps)
    return steps, now() - start, loss


def _is_true(scene: Scene, words: tuple[str, ...]) -> bool:
    try:
        return caption_is_true(scene.objects, words)
    except ValueError:  # not even shaped like a caption
        return False


@torch.no_grad()
def evaluate(model, dataset: SceneDataset, *, batch_size: int = 250) -> dict[str, float]:
    """Exact match, true-caption rate, attention-in-box rate and its chance level."""
    model.eval()
    vocab = dataset.vocab
    object_words = {vocab.token_to_id(w) for w in (*COLOURS, *SHAPES)}
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=dataset.collate)
    exact = true = hits = chance = words = 0.0
    index = 0
    for batch in loader:
        images, caption = batch["image"], batch["caption"]
        generated = model.generate(images)  # (B, T')
        for row in generated.tolist():
            scene = dataset.scenes[index]
            index += 1
            words_out = tuple(vocab.decode(row, strip_special=True))
            exact += words_out == scene.caption
            named = {(w1, w2) for w1, w2 in zip(words_out, words_out[1:])}
            complete = all((o.colour, o.shape) in named for o in scene.objects)
            true += complete and _is_true(scene, words_out)
        # Attention while predicting each reference word: step t predicts caption[:, t + 1].
        _, attn = model(images, caption[:, :-1], return_attn=True)  # (B, T-1, Hg, Wg)
        target = caption[:, 1:]  # (B, T-1)
        obj = batch["token_object"][:, 1:]  # (B, T-1), -1 for other words
        keep = (obj >= 0) & torch.isin(target, torch.tensor(sorted(object_words)))
        boxes = torch.gather(batch["boxes"], 1, obj.clamp(min=0)[..., None].expand(-1, -1, 4))
        cells = box_cell_mask(boxes, grid_size=attn.shape[-2:], image_size=images.shape[-1])
        peak = attn.flatten(2).argmax(dim=-1)  # (B, T-1)
        hit = torch.gather(cells.flatten(2), 2, peak[..., None])[..., 0]  # (B, T-1)
        hits += float(hit[keep].sum())
        chance += float(cells.flatten(2).float().mean(-1)[keep].sum())
        words += float(keep.sum())
    n = len(dataset)
    return {
        "exact": exact / n,
        "true": true / n,
        "attn_in_box": hits / words,
        "chance": chance / words,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=4000, help="training scenes")
    parser.add_argument("--test", type=int, default=500, help="held-out scenes")
    parser.add_argument("--size", type=int, default=16, help="canvas side in pixels (>= 16)")
    parser.add_argument("--seconds", type=float, default=60.0, help="training budget per model")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="budget clock")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    seed_everything(args.seed)
    train = scenes(args.train, args.seed, args.size)
    test = scenes(args.test, args.seed + 1, args.size)
    # Most frequent training caption: the best exact match of a model that ignores the image.
    counts: dict[tuple[str, ...], int] = {}
    for scene in train.scenes:
        counts[scene.caption] = counts.get(scene.caption, 0) + 1
    blind = max(counts, key=counts.get)
    blind_exact = sum(s.caption == blind for s in test.scenes) / len(test)

    # An 8x8 feature grid whatever the canvas: cells of 2 pixels at 16, 4 at 32; objects are
    # 5-10 pixels wide, so each one covers several cells.
    cnn_layers = max(1, (args.size // 8).bit_length() - 1)
    models = {"caption-rnn-attn": 5e-3, "caption-transformer": 2e-3}  # name -> learning rate
    rows = []
    for name, lr in models.items():
        seed_everything(args.seed)
        model = create(name, vocab_size=len(scene_vocab()), cnn_layers=cnn_layers)
        generator = torch.Generator().manual_seed(args.seed)
        loader = DataLoader(
            train,
            batch_size=args.batch_size,
            shuffle=True,
            collate_fn=train.collate,
            generator=generator,
        )
        steps, used, loss = train_for(model, loader, lr=lr, seconds=args.seconds, clock=args.clock)
        result = evaluate(model, test)
        rows.append((name, count_parameters(model), steps, used, loss, result))

    print(
        f"\nscenes: {args.train} train / {args.test} test, {args.size}x{args.size} pixels, "
        f"2-3 objects, captions left to right; {args.threads} thread(s), {args.clock} clock"
    )
    print(f"blind baseline (most frequent training caption): exact match {blind_exact:.3f}\n")
    header = (
        f"{'model':<20} {'params':>8} {'steps':>6} {'train s':>8} {'loss':>6} "
        f"{'exact':>6} {'true':>6} {'attn in box':>11} {'chance':>7} {'x chance':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, params, steps, used, loss, r in rows:
        print(
            f"{name:<20} {params:>8,} {steps:>6} {used:>8.1f} {loss:>6.3f} "
            f"{r['exact']:>6.3f} {r['true']:>6.3f} {r['attn_in_box']:>11.3f} {r['chance']:>7.3f} "
            f"{r['attn_in_box'] / r['chance']:>8.1f}"
        )
    print(
        "\nexact: greedy caption == reference; true: caption_is_true and names every object;\n"
        "attn in box: arg-max attention cell inside the named object's box, over the colour and "
        "shape words\n(transformer: last block's cross-attention, mean over heads)."
    )


if __name__ == "__main__":
    main()

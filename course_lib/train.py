"""Training loop: one small `fit` used by the book and the assignments.

``fit(model, loader, loss_fn=...)`` runs mini-batch gradient descent with what the chapters need and
nothing more: a progress bar with the live loss, a `History`, an evaluation callback after each
epoch, gradient-norm clipping (Pascanu et al., "On the difficulty of training recurrent neural
networks", ICML 2013), mixed precision through `course_lib.gpu.autocast`, step and time budgets,
and checkpoints from which a run continues exactly as if it had never stopped.

The model and batch can be anything: ``loss_fn(model, batch)`` receives the model and the batch
(already moved to the device) and returns a scalar loss tensor, for example::

    def loss_fn(model, batch):
        x, y = batch                                   # x (B, T), y (B, T)
        logits = model(x)                              # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

Importing this module has no side effects.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from course_lib.gpu import (
    autocast,
    autocast_dtype,
    get_device,
    is_main_process,
    seed_everything,
    to_device,
    unwrap_model,
)

__all__ = ["History", "fit", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_FORMAT = 1


@dataclasses.dataclass
class History:
    """What happened during training.

    Attributes:
        losses: training loss of every optimizer step, in order.
        evals: one dict per epoch when an ``eval_fn`` is given:
            ``{"epoch": 1-based epoch, "step": steps done so far, **metrics}``.
        grad_norms: global gradient norm before clipping, per step (only when ``clip_grad`` is set).
        elapsed: seconds spent inside `fit`, summed over resumed runs.
        epochs_completed: number of full passes over the training data.
        stop_reason: ``"epochs"``, ``"max_steps"`` or ``"max_seconds"`` ("" before training).
    """

    losses: list[float] = dataclasses.field(default_factory=list)
    evals: list[dict[str, float]] = dataclasses.field(default_factory=list)
    grad_norms: list[float] = dataclasses.field(default_factory=list)
    elapsed: float = 0.0
    epochs_completed: int = 0
    stop_reason: str = ""

    @property
    def steps(self) -> int:
        """Number of optimizer steps taken."""
        return len(self.losses)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python containers only, so ``torch.load(weights_only=True)`` accepts it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> History:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# --------------------------------------------------------------------------------------------------
# Random-number-generator state (so that a resumed run draws the same numbers)
# --------------------------------------------------------------------------------------------------


def _capture_rng(generator: torch.Generator | None = None) -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        # NumPy's state is stored as plain ints and floats: weights_only loading refuses ndarrays.
        "numpy": (kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "loader_generator": generator.get_state() if generator is not None else None,
    }
    return state


def _restore_rng(state: Mapping[str, Any], generator: torch.Generator | None = None) -> None:
    random.setstate(_as_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    if generator is not None and state.get("loader_generator") is not None:
        generator.set_state(state["loader_generator"].cpu())


def _as_tuples(x: Any) -> Any:
    """random.setstate needs tuples all the way down."""
    return tuple(_as_tuples(v) for v in x) if isinstance(x, list | tuple) else x


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    history: History | None = None,
    *,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Save state dicts (model, optimizer, scheduler, scaler), the history and the RNG state.

    Only state dicts and plain containers are written, so `load_checkpoint` can use
    ``torch.load(weights_only=True)``. The file is written to a temporary name and renamed, so an
    interrupted save never leaves a half-written checkpoint. Returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format": CHECKPOINT_FORMAT,
        "model": unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "history": history.to_dict() if history is not None else None,
        "rng": _capture_rng(),
        "extra": dict(extra) if extra is not None else {},
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    map_location: str | torch.device = "cpu",
    restore_rng: bool = False,
) -> dict[str, Any]:
    """Load a checkpoint written by `save_checkpoint` into the objects given (each optional).

    Loads with ``torch.load(weights_only=True)``: no arbitrary code runs from the file.
    ``restore_rng=True`` also puts back Python's, NumPy's and PyTorch's random state.

    Returns:
        The checkpoint dict, with ``"history"`` turned back into a `History` (or None).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a course_lib checkpoint (written by save_checkpoint)")
    if model is not None:
        unwrap_model(model).load_state_dict(state["model"])
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is not None:
            if state[name] is None:
                raise ValueError(f"{path} holds no {name} state; it was saved without one")
            obj.load_state_dict(state[name])
    if restore_rng:
        _restore_rng(state["rng"])
    if state["history"] is not None:
        state["history"] = History.from_dict(state["history"])
    return state


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


def _check_loss(loss: Any, step: int, epoch: int, batch_index: int) -> float:
    where = f"step {step} (epoch {epoch}, batch {batch_index})"
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"loss_fn must return a scalar torch.Tensor, got {type(loss).__name__} at {where}"
        )
    if loss.numel() != 1:
        raise ValueError(
            f"loss_fn must return a scalar, got a tensor of shape {tuple(loss.shape)} at {where}; "
            "reduce it, e.g. with .mean()"
        )
    value = loss.detach().float().item()
    if not math.isfinite(value):
        raise FloatingPointError(
            f"the loss became {value} at {where}; training stopped. Try a smaller learning rate, "
            "clip_grad=1.0, or amp=False, and check the batch for NaN/inf values."
        )
    return value


def _run_eval(eval_fn: Callable[[nn.Module], Any], model: nn.Module) -> dict[str, float]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            result = eval_fn(model)
    finally:
        model.train(was_training)
    if isinstance(result, Mapping):
        return {str(k): float(v) for k, v in result.items()}
    if isinstance(result, int | float | torch.Tensor | np.number):
        return {"eval": float(result)}
    raise TypeError(
        f"eval_fn must return a number or a dict of numbers, got {type(result).__name__}"
    )


def _check_positive(name: str, value: float | None, *, integer: bool = False) -> None:
    if value is None:
        return
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


def fit(
    model: nn.Module,
    train_loader: Iterable[Any],
    *,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    optimizer: torch.optim.Optimizer | None = None,
    epochs: int = 1,
    lr: float = 1e-3,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    eval_fn: Callable[[nn.Module], float | Mapping[str, float]] | None = None,
    clip_grad: float | None = None,
    amp: bool = False,
    device: str | torch.device | None = None,
    checkpoint: str | os.PathLike | None = None,
    seed: int | None = None,
    progress: bool = True,
    scheduler: Any | None = None,
) -> History:
    """Train ``model`` on ``train_loader`` and return the `History`.

    Args:
        model: any module, or a DDP-wrapped one (`course_lib.gpu.wrap_ddp`); moved to ``device``.
        train_loader: a `DataLoader` or any re-iterable of batches (a list works).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``; the batch arrives already on ``device``
            (via `course_lib.gpu.to_device`), and the model is in training mode.
        optimizer: defaults to ``AdamW(model.parameters(), lr=lr)``; ``lr`` is ignored otherwise.
        epochs: passes over ``train_loader``.
        max_steps: stop after this many optimizer steps in total (counting resumed ones).
        max_seconds: stop after this many seconds of this call (checked after each step).
        eval_fn: ``eval_fn(model) -> number or {name: number}``, called after each epoch in eval
            mode under ``torch.no_grad()``; results go to ``history.evals``.
        clip_grad: clip the global gradient norm to this value (norms go to
            ``history.grad_norms``).
        amp: run ``loss_fn`` under `course_lib.gpu.autocast` (bf16 on CPU; bf16 or fp16 with loss
            scaling on CUDA).
        device: where to train; defaults to `course_lib.gpu.get_device()`.
        checkpoint: a file path. If it exists, training resumes from it (model, optimizer,
            scheduler, history, position in the epoch and random state), and it is rewritten after
            every epoch and when a budget stops the run. A resumed run gives the same losses as an
            uninterrupted one with the same seed.
        seed: if given, `course_lib.gpu.seed_everything(seed)` first (shuffling, dropout).
        progress: show a tqdm progress bar with the live loss (main process only).
        scheduler: a learning-rate scheduler, stepped after every optimizer step.

    Raises:
        ValueError: an empty loader, a non-scalar loss or a bad argument.
        FloatingPointError: the loss became NaN or infinite (the message names the step).
    """
    if not callable(loss_fn):
        raise TypeError("loss_fn must be a callable loss_fn(model, batch) -> scalar tensor")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    _check_positive("epochs", epochs, integer=True)
    _check_positive("lr", lr)
    _check_positive("max_steps", max_steps, integer=True)
    _check_positive("max_seconds", max_seconds)
    _check_positive("clip_grad", clip_grad)
    loader_len = len(train_loader) if hasattr(train_loader, "__len__") else None
    if loader_len == 0:
        raise ValueError(
            "train_loader yields no batches (is the dataset empty, or batch_size larger than the "
            "dataset with drop_last=True?)"
        )

    if seed is not None:
        seed_everything(seed)
    device = get_device(device)
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = None
    if amp and autocast_dtype(device) == torch.float16:
        scaler = torch.amp.GradScaler(device.type)
    generator = getattr(train_loader, "generator", None)
    sampler = getattr(train_loader, "sampler", None)

    history = History()
    start_epoch, resume_batches, epoch_rng, resume_rng = 0, 0, None, None
    if checkpoint is not None and Path(checkpoint).is_file():
        state = load_checkpoint(
            checkpoint, model, optimizer, scheduler=scheduler, scaler=scaler, map_location=device
        )
        history = state["history"] or History()
        train_state = state["extra"]
        start_epoch = train_state["epoch"]
        resume_batches = train_state["batch_in_epoch"]
        epoch_rng, resume_rng = train_state.get("epoch_rng"), train_state["rng"]
        if not resume_batches:
            _restore_rng(resume_rng, generator)

    total = epochs * loader_len if loader_len is not None else None
    if max_steps is not None:
        total = max_steps if total is None else min(total, max_steps)
    main = is_main_process()
    bar = tqdm(
        total=total,
        initial=min(history.steps, total or history.steps),
        desc="fit",
        disable=not (progress and main),
        dynamic_ncols=True,
    )
    start_time = time.perf_counter()
    elapsed_before = history.elapsed

    def save(epoch: int, batch_in_epoch: int, rng_at_epoch_start: dict | None) -> None:
        history.elapsed = elapsed_before + time.perf_counter() - start_time
        if checkpoint is not None and main:
            train_state = {
                "epoch": epoch,
                "batch_in_epoch": batch_in_epoch,
                "rng": _capture_rng(generator),
            }
            if batch_in_epoch:
                train_state["epoch_rng"] = rng_at_epoch_start
            save_checkpoint(
                checkpoint,
                model,
                optimizer,
                history,
                scheduler=scheduler,
                scaler=scaler,
                extra=train_state,
            )

    stop = "max_steps" if max_steps is not None and history.steps >= max_steps else None
    model.train()
    try:
        for epoch in range(start_epoch, epochs):
            if stop:
                break
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            if resume_batches:
                # Replay the epoch's shuffle, skip the batches already trained on, then continue
                # from the random state at the moment the checkpoint was written.
                _restore_rng(epoch_rng, generator)
                batches = iter(train_loader)
                for _ in range(resume_batches):
                    next(batches)
                _restore_rng(resume_rng, generator)
            else:
                epoch_rng = _capture_rng(generator)
                batches = iter(train_loader)
            batch_in_epoch, resume_batches = resume_batches, 0
            epoch_losses: list[float] = []

            for batch in batches:
                step = history.steps + 1
                batch = to_device(batch, device)
                with autocast(device, enabled=amp):
                    loss = loss_fn(model, batch)
                value = _check_loss(loss, step, epoch + 1, batch_in_epoch)
                optimizer.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                if clip_grad is not None:
                    if scaler is not None:
                        scaler.unscale_(optimizer)
                    norm = nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
                    history.grad_norms.append(float(norm))
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                history.losses.append(value)
                epoch_losses.append(value)
                batch_in_epoch += 1
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{value:.4f}")
                if max_steps is not None and history.steps >= max_steps:
                    stop = "max_steps"
                elif max_seconds is not None and time.perf_counter() - start_time >= max_seconds:
                    stop = "max_seconds"
                if stop:
                    break

            if batch_in_epoch == 0:
                raise ValueError(
                    f"train_loader yielded no batches in epoch {epoch + 1}; a generator can only "
                    "be iterated once, so pass a list or a DataLoader"
                )
            epoch_done = stop is None or batch_in_epoch == loader_len
            if not epoch_done:
                save(epoch, batch_in_epoch, epoch_rng)
                break
            history.epochs_completed = epoch + 1
            summary = {"epoch": epoch + 1}
            if epoch_losses:
                summary["mean loss"] = sum(epoch_losses) / len(epoch_losses)
            if eval_fn is not None:
                metrics = _run_eval(eval_fn, model)
                history.evals.append({"epoch": epoch + 1, "step": history.steps, **metrics})
                summary.update(metrics)
            if progress and main:
                tqdm.write(", ".join(f"{k} {v:.4g}" for k, v in summary.items()))
            save(epoch + 1, 0, None)
    finally:
        bar.close()
    history.stop_reason = stop or "epochs"
    history.elapsed = elapsed_before + time.perf_counter() - start_time
    return history

"""Tests for course_lib.train: fit, History, checkpoints, budgets, determinism and resuming."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from course_lib.train import History, fit, load_checkpoint, save_checkpoint

W_TRUE = torch.tensor([[2.0, -1.0, 0.5]])


def regression_data(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, x @ W_TRUE.T + 0.3)


def mse(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))


def shuffled_loader() -> DataLoader:
    return DataLoader(regression_data(), batch_size=8, shuffle=True)


def test_fit_learns_and_fills_history():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    loader = DataLoader(regression_data(), batch_size=8, shuffle=True)
    evals_seen = []

    def eval_fn(m):
        evals_seen.append((m.training, torch.is_grad_enabled()))
        x, y = regression_data().tensors
        return {"mse": F.mse_loss(m(x), y), "ones": 1}

    history = fit(model, loader, loss_fn=mse, epochs=30, lr=0.05, eval_fn=eval_fn, progress=False)
    assert isinstance(history, History)
    assert history.steps == len(history.losses) == 30 * 4
    assert history.losses[-1] < 0.01 * history.losses[0]
    torch.testing.assert_close(model.weight.detach(), W_TRUE, atol=0.05, rtol=0)
    assert [e["epoch"] for e in history.evals] == list(range(1, 31))
    assert [e["step"] for e in history.evals] == [4 * e for e in range(1, 31)]
    assert history.evals[-1]["mse"] < 1e-3 and history.evals[-1]["ones"] == 1.0
    assert evals_seen == [(False, False)] * 30  # eval mode, no grad
    assert model.training  # back in training mode afterwards
    assert history.epochs_completed == 30 and history.stop_reason == "epochs"
    assert history.elapsed > 0 and history.grad_norms == []


def test_fit_accepts_any_batch_structure_and_a_list_loader():
    seen = []

    def loss_fn(model, batch):
        seen.append(sorted(batch))
        return F.mse_loss(model(batch["inputs"]), batch["targets"])

    data = regression_data(8)
    batches = [
        {"inputs": data.tensors[0][i : i + 4], "targets": data.tensors[1][i : i + 4]}
        for i in (0, 4)
    ]
    history = fit(nn.Linear(3, 1), batches, loss_fn=loss_fn, epochs=2, progress=False)
    assert history.steps == 4 and seen == [["inputs", "targets"]] * 4
    eval_history = fit(
        nn.Linear(3, 1), batches, loss_fn=loss_fn, eval_fn=lambda m: 0.5, progress=False
    )
    assert eval_history.evals == [{"epoch": 1, "step": 2, "eval": 0.5}]


def test_same_seed_same_losses_different_seed_different():
    def run(seed):
        return fit(
            make_mlp(), shuffled_loader(), loss_fn=mse, epochs=2, seed=seed, progress=False
        ).losses

    first = run(7)
    assert run(7) == first
    assert run(8) != first


@pytest.mark.parametrize("stop_after", [6, 4])  # mid-epoch, and exactly at an epoch's end
def test_resume_from_checkpoint_continues_identically(tmp_path, stop_after):
    def eval_fn(model):
        return {"w": float(model[0].weight.sum())}

    def run(model, **kwargs):
        return fit(
            model,
            shuffled_loader(),
            loss_fn=mse,
            epochs=3,
            seed=3,
            eval_fn=eval_fn,
            progress=False,
            **kwargs,
        )

    full_model = make_mlp()
    full = run(full_model)
    ckpt = tmp_path / "run.pt"
    part = run(make_mlp(), checkpoint=ckpt, max_steps=stop_after)
    assert part.steps == stop_after and part.stop_reason == "max_steps" and ckpt.is_file()
    assert part.losses == full.losses[:stop_after]
    # A fresh process would build a fresh model and optimizer; the checkpoint supplies the rest.
    resumed_model = make_mlp(seed=99)
    resumed = run(resumed_model, checkpoint=ckpt)
    assert resumed.losses == full.losses
    assert resumed.evals == full.evals
    assert resumed.epochs_completed == 3 and resumed.stop_reason == "epochs"
    for p, q in zip(resumed_model.parameters(), full_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    # Resuming a finished run does nothing more.
    again = run(make_mlp(), checkpoint=ckpt)
    assert again.losses == full.losses


def test_save_and_load_checkpoint_round_trip(tmp_path):
    model = make_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    history = fit(
        model,
        shuffled_loader(),
        loss_fn=mse,
        optimizer=optimizer,
        scheduler=scheduler,
        progress=False,
    )
    path = save_checkpoint(
        tmp_path / "sub" / "c.pt",
        model,
        optimizer,
        history,
        scheduler=scheduler,
        extra={"note": "hi"},
    )
    # Plain state dicts only: torch's safe loader accepts the file.
    assert isinstance(torch.load(path, weights_only=True), dict)

    model2 = make_mlp(seed=5)
    optimizer2 = torch.optim.AdamW(model2.parameters(), lr=1.0)
    scheduler2 = torch.optim.lr_scheduler.StepLR(optimizer2, step_size=1, gamma=0.5)
    state = load_checkpoint(path, model2, optimizer2, scheduler=scheduler2)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(model2.state_dict()[k], v, rtol=0, atol=0)
    assert optimizer2.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5**4)
    assert scheduler2.last_epoch == 4
    torch.testing.assert_close(
        optimizer2.state_dict()["state"][0]["exp_avg"],
        optimizer.state_dict()["state"][0]["exp_avg"],
    )
    assert isinstance(state["history"], History) and state["history"].losses == history.losses
    assert state["extra"] == {"note": "hi"}

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "rng.pt", model)
    torch.rand(5)
    load_checkpoint(tmp_path / "rng.pt", restore_rng=True)
    assert torch.equal(torch.rand(3), expected)

    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a course_lib checkpoint"):
        load_checkpoint(tmp_path / "other.pt", model2)
    save_checkpoint(tmp_path / "bare.pt", model)
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(tmp_path / "bare.pt", model2, optimizer2)


def test_budgets_stop_the_run():
    history = fit(
        nn.Linear(3, 1), shuffled_loader(), loss_fn=mse, epochs=10, max_steps=7, progress=False
    )
    assert history.steps == 7 and history.stop_reason == "max_steps"
    assert history.epochs_completed == 1

    def slow_mse(model, batch):
        time.sleep(0.01)
        return mse(model, batch)

    history = fit(
        nn.Linear(3, 1),
        shuffled_loader(),
        loss_fn=slow_mse,
        epochs=100,
        max_seconds=0.05,
        progress=False,
    )
    assert history.stop_reason == "max_seconds"
    assert 1 <= history.steps < 100 and history.elapsed >= 0.05  # 400 steps without the budget


def test_gradient_clipping_bounds_the_update():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    def huge_loss(model, batch):
        return 1e4 * mse(model, batch)

    history = fit(
        model,
        [regression_data(8).tensors],
        loss_fn=huge_loss,
        optimizer=optimizer,
        clip_grad=0.01,
        progress=False,
    )
    change = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert change.norm() <= 0.01 * (1 + 1e-5)
    assert len(history.grad_norms) == 1 and history.grad_norms[0] > 100


def test_amp_on_cpu_runs_in_bfloat16():
    dtypes = []

    def loss_fn(model, batch):
        x, y = batch
        out = model(x)
        dtypes.append(out.dtype)
        return F.mse_loss(out.float(), y)

    history = fit(
        nn.Linear(3, 1), shuffled_loader(), loss_fn=loss_fn, amp=True, device="cpu", progress=False
    )
    assert set(dtypes) == {torch.bfloat16}
    assert all(math.isfinite(v) for v in history.losses)


def test_progress_bar_shows_live_loss(capsys):
    fit(nn.Linear(3, 1), shuffled_loader(), loss_fn=mse, epochs=2, progress=True)
    err = capsys.readouterr().err
    assert "loss=" in err and "8/8" in err
    fit(nn.Linear(3, 1), shuffled_loader(), loss_fn=mse, progress=False)
    assert capsys.readouterr().err == ""


def test_bad_input_gets_clear_errors():
    model = nn.Linear(3, 1)
    empty = DataLoader(TensorDataset(torch.zeros(0, 3), torch.zeros(0, 1)), batch_size=4)
    with pytest.raises(ValueError, match="no batches"):
        fit(model, empty, loss_fn=mse, progress=False)
    with pytest.raises(ValueError, match="no batches"):
        fit(model, iter([]), loss_fn=mse, progress=False)
    once = iter([regression_data(4).tensors])  # a generator is exhausted after one epoch
    with pytest.raises(ValueError, match="epoch 2.*generator"):
        fit(model, once, loss_fn=mse, epochs=2, progress=False)

    calls = []

    def nan_at_third(model, batch):
        calls.append(1)
        loss = mse(model, batch)
        return loss * float("nan") if len(calls) == 3 else loss

    with pytest.raises(FloatingPointError, match=r"nan at step 3 \(epoch 1, batch 2\)"):
        fit(model, shuffled_loader(), loss_fn=nan_at_third, progress=False)
    with pytest.raises(ValueError, match=r"shape \(8, 1\).*mean"):
        fit(model, shuffled_loader(), loss_fn=lambda m, b: m(b[0]), progress=False)
    with pytest.raises(TypeError, match="scalar torch.Tensor"):
        fit(model, shuffled_loader(), loss_fn=lambda m, b: 1.0, progress=False)
    with pytest.raises(ValueError, match="epochs must be positive"):
        fit(model, shuffled_loader(), loss_fn=mse, epochs=0)
    with pytest.raises(TypeError, match="max_steps must be an int"):
        fit(model, shuffled_loader(), loss_fn=mse, max_steps=2.5)
    with pytest.raises(TypeError, match="eval_fn must return"):
        fit(model, shuffled_loader(), loss_fn=mse, eval_fn=lambda m: "good", progress=False)

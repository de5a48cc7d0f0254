"""One data-parallel training step, run by tests/lib/test_gpu.py under torchrun with 2 CPU
processes.

    python -m torch.distributed.run --nproc_per_node=2 --standalone tests/lib/ddp_worker.py OUT_DIR

Each rank starts from a different random model (DDP must broadcast rank 0's), trains one SGD step
with `course_lib.train.fit` on its own half of the batch, and writes what it ended with to
``OUT_DIR/rank{r}.json``. Averaged gradients make both ranks equal `single_process_reference()`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

N, D_IN, D_OUT, LR = 8, 4, 2, 0.1


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, D_IN, generator=g), torch.randn(N, D_OUT, generator=g)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, 3), nn.Tanh(), nn.Linear(3, D_OUT))


def single_process_reference() -> dict[str, list]:
    """Parameters after one SGD step on the full batch, in one process."""
    model = make_model(seed=0)
    x, y = make_data()
    F.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return {k: v.tolist() for k, v in model.state_dict().items()}


def main(out_dir: Path) -> None:
    from course_lib import gpu
    from course_lib.train import fit

    info = gpu.ddp_setup()
    try:
        model = gpu.wrap_ddp(make_model(seed=info.rank).to(info.device))
        x, y = make_data()
        dataset = TensorDataset(x, y, torch.arange(N))
        loader = gpu.distributed_loader(dataset, batch_size=N // info.world_size, shuffle=False)
        seen: dict[str, object] = {}

        def loss_fn(model, batch):
            xb, yb, idx = batch
            loss = F.mse_loss(model(xb), yb)
            seen.update(indices=idx.tolist(), local_loss=loss.item())
            return loss

        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        fit(model, loader, loss_fn=loss_fn, optimizer=optimizer, max_steps=1, progress=False)
        state = gpu.unwrap_model(model).state_dict()
        result = {
            "rank": info.rank,
            "world_size": info.world_size,
            "backend": info.backend,
            "is_main": gpu.is_main_process(),
            "mean_loss": float(gpu.all_reduce_mean(torch.tensor(seen["local_loss"]))),
            "params": {k: v.tolist() for k, v in state.items()},
            **seen,
        }
        (out_dir / f"rank{info.rank}.json").write_text(json.dumps(result))
    finally:
        gpu.ddp_cleanup()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

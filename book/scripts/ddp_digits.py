"""Data-parallel training of a small classifier on the digits, for the book's appendix A.

Run it as one process, or as several under torchrun (CPU processes talk over the gloo backend,
GPUs over NCCL):

    python book/scripts/ddp_digits.py
    torchrun --standalone --nproc_per_node=2 book/scripts/ddp_digits.py

Every rank builds the same model, `wrap_ddp` broadcasts rank 0's weights, `distributed_loader`
gives each rank its own shard of every epoch, and DDP averages the gradients during backward, so
all replicas take identical steps. Only rank 0 prints the summary.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from course_lib import gpu
from course_lib.data import DigitsDataset
from course_lib.train import fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    args = parser.parse_args()

    info = gpu.ddp_setup()  # world_size 1 without torchrun
    try:
        torch.manual_seed(1234 + info.rank)  # different on purpose: DDP must broadcast rank 0's
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))
        model = gpu.wrap_ddp(model.to(info.device))
        train, test = DigitsDataset(split="train"), DigitsDataset(split="test")
        loader = gpu.distributed_loader(train, batch_size=args.batch_size, seed=0)

        def loss_fn(model, batch):
            images, labels = batch
            return F.cross_entropy(model(images), labels)

        history = fit(
            model, loader, loss_fn=loss_fn, epochs=args.epochs, lr=3e-3, device=info.device,
            progress=False,
        )  # fmt: skip
        plain = gpu.unwrap_model(model)
        checksum = sum(p.double().sum() for p in plain.parameters())
        mean_checksum = gpu.all_reduce_mean(checksum.detach().cpu().reshape(1))
        same = bool(torch.allclose(checksum.cpu().reshape(1), mean_checksum.to(torch.float64)))
        # one write per line (text and newline together): the ranks share one stdout, and an
        # unbuffered print writes its end separately, so lines could run into each other
        print(
            f"rank {info.rank}/{info.world_size}: {len(loader.sampler)} training images per epoch,"
            f" {history.steps} steps, replicas identical: {same}\n",
            end="",
            flush=True,
        )
        if gpu.is_main_process():
            with torch.no_grad():
                images, labels = test.images.to(info.device), test.labels.to(info.device)
                accuracy = (plain(images).argmax(-1) == labels).float().mean().item()
            print(f"backend {info.backend}: test accuracy {accuracy:.3f}\n", end="", flush=True)
    finally:
        gpu.ddp_cleanup()


if __name__ == "__main__":
    main()

"""Tests for course_lib.gpu: devices, seeding, autocast, timing, memory, batches and DDP."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import time_limits
import torch
from torch import nn

from course_lib import gpu

REPO = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# ---------------------------------------------------------------------------------------- devices


def test_get_device_auto_prefers_best_available(monkeypatch):
    monkeypatch.delenv(gpu.DEVICE_ENV_VAR, raising=False)
    expected = "cuda" if torch.cuda.is_available() else "mps" if gpu._mps_available() else "cpu"
    assert gpu.get_device().type == expected
    assert gpu.get_device("auto").type == expected


def test_get_device_env_var_and_argument(monkeypatch):
    monkeypatch.setenv(gpu.DEVICE_ENV_VAR, "cpu")
    assert gpu.get_device() == torch.device("cpu")
    monkeypatch.setenv(gpu.DEVICE_ENV_VAR, " CPU ")
    assert gpu.get_device() == torch.device("cpu")
    # An explicit argument wins over the environment.
    monkeypatch.setenv(gpu.DEVICE_ENV_VAR, "gpu-please")
    assert gpu.get_device("cpu") == torch.device("cpu")
    assert gpu.get_device(torch.device("cpu")) == torch.device("cpu")


def test_get_device_errors(monkeypatch):
    monkeypatch.setenv(gpu.DEVICE_ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="COURSE_DEVICE.*'tpu'.*'cpu'"):
        gpu.get_device()
    monkeypatch.delenv(gpu.DEVICE_ENV_VAR)
    with pytest.raises(ValueError, match="not a device"):
        gpu.get_device("cuda0")
    if not torch.cuda.is_available():
        monkeypatch.setenv(gpu.DEVICE_ENV_VAR, "cuda")
        with pytest.raises(RuntimeError, match="CUDA is not available.*unset COURSE_DEVICE"):
            gpu.get_device()
    else:
        with pytest.raises(RuntimeError, match="GPU 999"):
            gpu.get_device("cuda:999")
    if not gpu._mps_available():
        with pytest.raises(RuntimeError, match="MPS"):
            gpu.get_device("mps")


# --------------------------------------------------------------------------------------- seeding


def _draw() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_seed_everything_reproduces_all_generators():
    gen = gpu.seed_everything(123)
    first, g_first = _draw(), torch.rand(2, generator=gen).tolist()
    gen = gpu.seed_everything(123)
    assert _draw() == first
    assert torch.rand(2, generator=gen).tolist() == g_first
    gpu.seed_everything(124)
    assert _draw() != first
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert isinstance(gen, torch.Generator) and gen.initial_seed() == 123


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "3", True])
def test_seed_everything_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        gpu.seed_everything(bad)


# -------------------------------------------------------------------------------------- autocast


def test_autocast_cpu_uses_bfloat16_and_can_be_disabled():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    assert gpu.autocast_dtype("cpu") == torch.bfloat16
    with gpu.autocast("cpu"):
        assert (a @ b).dtype == torch.bfloat16
    with gpu.autocast("cpu", enabled=False):
        assert (a @ b).dtype == torch.float32
    with gpu.autocast("cpu", dtype=torch.float16):
        assert (a @ b).dtype == torch.float16
    with pytest.raises(ValueError, match="float16 or torch.bfloat16"):
        gpu.autocast("cpu", dtype=torch.float64)


@needs_cuda
def test_autocast_cuda_dtype():
    a = torch.randn(4, 4, device="cuda")
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    with gpu.autocast("cuda"):
        assert (a @ a).dtype == expected


# ---------------------------------------------------------------------------------------- timing


def test_time_fn_counts_calls_and_measures_time():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.004)

    stats = gpu.time_fn(fn, repeats=5, warmup=2)
    assert len(calls) == 7
    assert stats["repeats"] == 5 and len(stats["times_ms"]) == 5
    assert 4.0 <= stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]
    assert stats["min_ms"] <= stats["mean_ms"] <= stats["max_ms"]
    assert stats["median_ms"] < 500
    with pytest.raises(ValueError, match="repeats"):
        gpu.time_fn(fn, repeats=0)
    with pytest.raises(TypeError, match="callable"):
        gpu.time_fn(42)


@needs_cuda
def test_time_fn_synchronizes_cuda():
    x = torch.randn(4096, 4096, device="cuda")
    stats = gpu.time_fn(lambda: x @ x, repeats=3, warmup=1, device="cuda")
    # ~137 GFLOP takes any GPU well over 0.05 ms; an unsynchronized launch takes ~0.01 ms.
    assert stats["median_ms"] > 0.05


# ---------------------------------------------------------------------------------------- memory


@pytest.mark.parametrize("method", ["auto", "sample"])
def test_peak_memory_cpu_sees_a_freed_allocation(method):
    n = 16 * 2**20  # 64 MiB of float32

    def big():
        x = torch.ones(n)  # pages are touched, so they are resident
        time.sleep(0.02)  # long enough for the sampling thread
        del x  # freed before returning: only the peak shows it

    def small():
        torch.ones(1000).sum()

    peak_big = gpu.peak_memory(big, device="cpu", cpu_method=method)
    assert peak_big >= 0.9 * 4 * n, peak_big
    assert gpu.peak_memory(small, device="cpu", cpu_method=method) < 0.25 * 4 * n
    # A second, identical measurement still sees it (freed heap pages are reused, not missed).
    assert gpu.peak_memory(big, device="cpu", cpu_method=method) >= 0.9 * 4 * n


def test_peak_memory_rejects_bad_method():
    with pytest.raises(ValueError, match="cpu_method"):
        gpu.peak_memory(lambda: None, device="cpu", cpu_method="magic")


@needs_cuda
def test_peak_memory_cuda_is_exact():
    n = 8 * 2**20
    peak = gpu.peak_memory(lambda: torch.ones(n, device="cuda").sum(), device="cuda")
    assert 4 * n <= peak < 4 * n + 2**20


# ----------------------------------------------------------------------------- parameters/batches


def test_count_parameters_and_format():
    model = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 2))
    assert gpu.count_parameters(model) == 10 * 5 + 5 + 5 * 2 + 2
    model[0].requires_grad_(False)
    assert gpu.count_parameters(model, trainable_only=True) == 5 * 2 + 2
    tied = nn.Module()
    tied.a = nn.Linear(4, 4, bias=False)
    tied.b = nn.Linear(4, 4, bias=False)
    tied.b.weight = tied.a.weight  # shared: counted once
    assert gpu.count_parameters(tied) == 16
    assert gpu.format_count(86_389_248) == "86.4M"
    assert gpu.format_count(1_234) == "1.2K"
    assert gpu.format_count(175e9) == "175.0B"
    assert gpu.format_count(999) == "999"
    with pytest.raises(TypeError, match="nn.Module"):
        gpu.count_parameters(torch.zeros(3))


Pair = collections.namedtuple("Pair", ["x", "y"])


@dataclasses.dataclass(frozen=True)
class Batch:
    tokens: torch.Tensor
    lengths: torch.Tensor
    names: list[str]


def test_to_device_nested_structures():
    batch = {
        "pair": Pair(torch.zeros(2), torch.ones(3)),
        "items": [torch.zeros(1), (torch.ones(2), "text", 3)],
        "dc": Batch(torch.zeros(2, 3), torch.tensor([3, 2]), ["a", "b"]),
        "none": None,
    }
    moved = gpu.to_device(batch, "meta")  # the meta device exists on every machine
    assert isinstance(moved["pair"], Pair) and moved["pair"].y.device.type == "meta"
    assert moved["pair"].x.shape == (2,)
    assert isinstance(moved["items"], list) and isinstance(moved["items"][1], tuple)
    assert moved["items"][0].device.type == "meta" and moved["items"][1][0].device.type == "meta"
    assert moved["items"][1][1:] == ("text", 3)
    assert isinstance(moved["dc"], Batch) and moved["dc"].tokens.device.type == "meta"
    assert moved["dc"].names == ["a", "b"] and moved["none"] is None
    # The input is left untouched.
    assert batch["pair"].x.device.type == "cpu"


def test_to_device_uses_dot_to_of_other_objects():
    class Encoding(dict):
        def to(self, device):
            return {k: v.to(device) for k, v in self.items()}

    moved = gpu.to_device([Encoding(ids=torch.zeros(2))], "meta")
    assert moved[0]["ids"].device.type == "meta"


# ------------------------------------------------------------------------------------------- DDP


def test_ddp_helpers_without_a_process_group(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    info = gpu.ddp_setup()
    assert (info.rank, info.world_size, info.backend) == (0, 1, None)
    assert gpu.is_main_process()
    model = nn.Linear(2, 2)
    assert gpu.wrap_ddp(model) is model and gpu.unwrap_model(model) is model
    loader = gpu.distributed_loader(torch.arange(10), batch_size=4, shuffle=False)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert float(gpu.all_reduce_mean(3.0)) == 3.0
    gpu.ddp_cleanup()  # nothing to clean: no error
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        gpu.ddp_setup()


@pytest.mark.slow
def test_ddp_two_cpu_ranks_average_gradients(tmp_path):
    """Two gloo ranks, each on half the batch, end one step with the full-batch reference params."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), COURSE_DEVICE="cpu")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--standalone",
        str(REPO / "tests" / "lib" / "ddp_worker.py"),
        str(tmp_path),
    ]
    result = time_limits.run(cmd, env=env, capture_output=True, text=True, cpu=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    sys.path.insert(0, str(REPO / "tests" / "lib"))
    try:
        import ddp_worker
    finally:
        sys.path.pop(0)
    reference = ddp_worker.single_process_reference()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, out in enumerate(ranks):
        assert out["world_size"] == 2 and out["rank"] == r and out["backend"] == "gloo"
        assert out["is_main"] == (r == 0)
        for name, value in reference.items():
            np.testing.assert_allclose(out["params"][name], value, rtol=1e-5, atol=1e-6)
    # The ranks saw different data (so agreement comes from averaging, not from equal inputs).
    assert ranks[0]["indices"] != ranks[1]["indices"]
    assert sorted(ranks[0]["indices"] + ranks[1]["indices"]) == list(range(ddp_worker.N))
    assert ranks[0]["local_loss"] != ranks[1]["local_loss"]
    np.testing.assert_allclose(ranks[0]["mean_loss"], ranks[1]["mean_loss"], rtol=1e-6)

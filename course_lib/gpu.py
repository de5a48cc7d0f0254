"""Device, reproducibility, timing, memory and data-parallel helpers.

Everything the chapters need to run the same code on a laptop CPU, an Apple GPU (MPS) or an NVIDIA
GPU, and to measure it honestly:

- `get_device` picks CUDA > MPS > CPU, overridable with the ``COURSE_DEVICE`` environment variable;
- `seed_everything` seeds Python, NumPy and PyTorch and sets the cuDNN determinism flags;
- `autocast` is mixed precision with a sensible dtype per device (bf16 on CPU; bf16 or fp16 on
  CUDA);
- `time_fn` reports the median of repeats, synchronizing CUDA around each call (GPU kernels run
  asynchronously, so timing without a synchronize measures only the launch);
- `peak_memory` reports the extra bytes a function needs at its peak (CUDA allocator statistics, or
  the process's resident-set high-water mark on CPU);
- `count_parameters`, `format_count`, `to_device`;
- distributed data parallel (DDP, Li et al., "PyTorch Distributed: Experiences on Accelerating Data
  Parallel Training", VLDB 2020) under ``torchrun``: `ddp_setup`, `ddp_cleanup`, `is_main_process`,
  `wrap_ddp`, `unwrap_model`, `distributed_loader`, `all_reduce_mean`.

Importing this module has no side effects.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

__all__ = [
    "DEVICE_ENV_VAR",
    "DDPInfo",
    "all_reduce_mean",
    "autocast",
    "autocast_dtype",
    "count_parameters",
    "ddp_cleanup",
    "ddp_setup",
    "distributed_loader",
    "format_count",
    "get_device",
    "is_main_process",
    "peak_memory",
    "seed_everything",
    "time_fn",
    "to_device",
    "unwrap_model",
    "wrap_ddp",
]

DEVICE_ENV_VAR = "COURSE_DEVICE"

DeviceLike = str | torch.device


# --------------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------------


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def get_device(prefer: DeviceLike | None = None) -> torch.device:
    """Return the device to compute on.

    Order of precedence: the ``prefer`` argument, then the ``COURSE_DEVICE`` environment variable,
    then the best available device (CUDA > MPS > CPU). Accepted values: ``"auto"``, ``"cpu"``,
    ``"cuda"``, ``"cuda:N"``, ``"mps"`` (or a `torch.device`).

    Raises:
        ValueError: the value is not a device name.
        RuntimeError: the requested device is not available on this machine.
    """
    source = "prefer"
    if prefer is None:
        env = os.environ.get(DEVICE_ENV_VAR, "").strip()
        if env:
            prefer, source = env, f"environment variable {DEVICE_ENV_VAR}"
    if prefer is None or (isinstance(prefer, str) and prefer.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")

    name = str(prefer).strip().lower()
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", name):
        raise ValueError(
            f"{source}={prefer!r} is not a device this course knows; use one of 'auto', 'cpu', "
            "'cuda', 'cuda:N' or 'mps'."
        )
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"{source}={prefer!r} asks for CUDA, but CUDA is not available here (this PyTorch "
                f"build: {torch.__version__}, CUDA {torch.version.cuda}). Use 'cpu' or 'auto'"
                + (f", or unset {DEVICE_ENV_VAR}." if source != "prefer" else ".")
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"{source}={prefer!r} asks for GPU {device.index}, but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible (indices start at 0)."
            )
    if device.type == "mps" and not _mps_available():
        raise RuntimeError(
            f"{source}={prefer!r} asks for Apple's MPS backend, which is not available here. "
            "Use 'cpu' or 'auto'."
        )
    return device


def _as_device(device: DeviceLike | None) -> torch.device:
    return get_device() if device is None else torch.device(device)


def _synchronize(device: torch.device | None) -> None:
    """Wait for queued GPU work (no-op on CPU)."""
    if device is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    elif device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps" and _mps_available():
        torch.mps.synchronize()


# --------------------------------------------------------------------------------------------------
# Reproducibility
# --------------------------------------------------------------------------------------------------


def seed_everything(seed: int, *, deterministic: bool = True) -> torch.Generator:
    """Seed Python's `random`, NumPy, PyTorch (CPU and every CUDA device).

    With ``deterministic=True`` also sets ``torch.backends.cudnn.deterministic = True`` and
    ``torch.backends.cudnn.benchmark = False`` so that cuDNN picks the same kernels on every run.
    (``torch.use_deterministic_algorithms`` is left alone: it makes some CUDA ops raise.)

    Returns:
        A fresh CPU `torch.Generator` seeded with ``seed``, handy as ``DataLoader(generator=...)``.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


# --------------------------------------------------------------------------------------------------
# Mixed precision
# --------------------------------------------------------------------------------------------------


def autocast_dtype(device: DeviceLike | None = None) -> torch.dtype | None:
    """The low-precision dtype `autocast` uses on ``device``, or None where autocast is unavailable.

    CPU: bfloat16. CUDA: bfloat16 if the GPU supports it (Ampere and later), else float16.
    MPS: float16.
    """
    device = _as_device(device)
    if not torch.amp.is_autocast_available(device.type):
        return None
    if device.type == "cpu":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16


def autocast(
    device: DeviceLike | None = None,
    dtype: torch.dtype | None = None,
    enabled: bool = True,
) -> contextlib.AbstractContextManager:
    """Mixed-precision context: matmuls and convolutions inside run in a low-precision dtype.

    ``dtype=None`` picks `autocast_dtype(device)`. Returns a no-op context when ``enabled`` is
    False or when the device has no autocast support. float16 needs loss scaling when training
    (``torch.amp.GradScaler``); bfloat16 does not, which is why it is preferred.
    """
    device = _as_device(device)
    dtype = dtype if dtype is not None else autocast_dtype(device)
    if not enabled or dtype is None or not torch.amp.is_autocast_available(device.type):
        return contextlib.nullcontext()
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"autocast dtype must be torch.float16 or torch.bfloat16, got {dtype}")
    return torch.autocast(device_type=device.type, dtype=dtype)


# --------------------------------------------------------------------------------------------------
# Timing and memory
# --------------------------------------------------------------------------------------------------


def time_fn(
    fn: Callable[[], Any],
    *,
    repeats: int = 10,
    warmup: int = 2,
    device: DeviceLike | None = None,
) -> dict[str, Any]:
    """Time ``fn()`` (no arguments): ``warmup`` untimed calls, then ``repeats`` timed ones.

    GPU work is synchronized before and after each timed call, so the time includes the kernels,
    not only their launch. ``device=None`` synchronizes CUDA if it is in use.

    Returns:
        ``{"median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "repeats", "times_ms"}``; report
        the median, which is robust to the odd slow call.
    """
    if not callable(fn):
        raise TypeError(f"time_fn needs a callable taking no arguments, got {type(fn).__name__}")
    if repeats < 1 or warmup < 0:
        raise ValueError(
            f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}"
        )
    dev = None if device is None else torch.device(device)
    for _ in range(warmup):
        fn()
    times_ms = []
    for _ in range(repeats):
        _synchronize(dev)
        start = time.perf_counter()
        fn()
        _synchronize(dev)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "median_ms": statistics.median(times_ms),
        "mean_ms": statistics.fmean(times_ms),
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "std_ms": statistics.pstdev(times_ms),
        "repeats": repeats,
        "times_ms": times_ms,
    }


def _read_proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), flags=re.MULTILINE)
    if match is None:
        raise OSError(f"{field} not found in /proc/self/status")
    return int(match.group(1)) * 1024


def _release_free_heap() -> None:
    """Hand freed heap pages back to the OS (glibc only), so that reusing them shows up in RSS."""
    if not sys.platform.startswith("linux"):
        return
    path = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(path or "libc.so.6").malloc_trim(0)


def _reset_rss_high_water_mark() -> bool:
    """Reset Linux's VmHWM to the current RSS (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _read_proc_status_kb("VmHWM")
    except OSError:
        return False
    return True


def _current_rss() -> int:
    if sys.platform.startswith("linux"):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    try:
        import psutil
    except ImportError as err:  # pragma: no cover - psutil is a dev dependency
        raise RuntimeError(
            "peak_memory on CPU outside Linux needs psutil (pip install psutil)"
        ) from err
    return psutil.Process().memory_info().rss


def _peak_rss_by_sampling(fn: Callable[[], Any], interval_s: float) -> int:
    baseline = _current_rss()
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _current_rss())
            time.sleep(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fn()
        peak = max(peak, _current_rss())
    finally:
        done.set()
        sampler.join()
    return max(0, peak - baseline)


def peak_memory(
    fn: Callable[[], Any],
    *,
    device: DeviceLike | None = None,
    cpu_method: Literal["auto", "hwm", "sample"] = "auto",
) -> int:
    """Extra memory, in bytes, that ``fn()`` needs at its peak, above what was in use before.

    CUDA: exact, from the caching allocator's statistics (``torch.cuda.max_memory_allocated``
    after ``reset_peak_memory_stats``); counts tensors only, not the allocator's cache or the CUDA
    context.

    CPU: the process's resident set size (RSS), which counts everything the process touches (Python
    objects and NumPy arrays too), at page granularity. ``cpu_method="hwm"`` (the default on Linux)
    first returns freed heap pages to the OS (``malloc_trim``, so reused pages show up), resets the
    kernel's high-water mark (``/proc/self/clear_refs``) and reads ``VmHWM`` afterwards: every peak
    is seen, however brief. ``"sample"`` (the fallback elsewhere) polls RSS from a thread every
    0.5 ms, so it can miss a peak shorter than that. Other threads of the process also count, so
    measure in a quiet process and treat small numbers (< a few MB) as noise.

    MPS: PyTorch keeps no peak statistic there, so this is only the memory still allocated after
    the call (a lower bound).
    """
    if not callable(fn):
        raise TypeError(f"peak_memory needs a callable taking no arguments, got {type(fn)}")
    device = _as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - baseline)
    if device.type == "mps":
        # MPS has no peak statistic; current allocation after the call is the best available.
        torch.mps.synchronize()
        baseline = torch.mps.current_allocated_memory()
        fn()
        torch.mps.synchronize()
        return max(0, torch.mps.current_allocated_memory() - baseline)
    if device.type != "cpu":
        raise ValueError(f"peak_memory supports cpu, cuda and mps devices, got {device}")
    if cpu_method not in ("auto", "hwm", "sample"):
        raise ValueError(f"cpu_method must be 'auto', 'hwm' or 'sample', got {cpu_method!r}")

    _release_free_heap()
    if cpu_method in ("auto", "hwm"):
        if _reset_rss_high_water_mark():
            baseline = _read_proc_status_kb("VmRSS")
            fn()
            return max(0, _read_proc_status_kb("VmHWM") - baseline)
        if cpu_method == "hwm":
            raise RuntimeError(
                "cpu_method='hwm' needs Linux's /proc/self/clear_refs, which is not available "
                "here; use cpu_method='sample'."
            )
    return _peak_rss_by_sampling(fn, interval_s=5e-4)


# --------------------------------------------------------------------------------------------------
# Parameters and batches
# --------------------------------------------------------------------------------------------------


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters (shared tensors counted once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"count_parameters needs an nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def format_count(n: int | float, precision: int = 1) -> str:
    """Human-readable count: ``86_389_248 -> "86.4M"``, ``1_234 -> "1.2K"``, ``999 -> "999"``."""
    for threshold, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= threshold:
            return f"{n / threshold:.{precision}f}{suffix}"
    return str(int(n)) if float(n).is_integer() else f"{n:.{precision}f}"


def to_device(batch: Any, device: DeviceLike, *, non_blocking: bool = False) -> Any:
    """Move every tensor inside a nested batch to ``device``, keeping the structure.

    Handles tensors, dicts (and other mappings), lists, tuples, namedtuples, dataclass instances
    and objects with a ``.to(device)`` method (e.g. a Hugging Face ``BatchEncoding``); anything
    else (strings, numbers, None) is returned unchanged.
    """
    device = torch.device(device)

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.to(device, non_blocking=non_blocking)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {f.name: move(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}
            return dataclasses.replace(x, **changes)
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
            return type(x)(*(move(v) for v in x))
        if isinstance(x, Mapping) and not hasattr(x, "to"):
            moved = {k: move(v) for k, v in x.items()}
            try:
                return type(x)(moved)
            except TypeError:
                return moved
        if isinstance(x, list | tuple):
            return type(x)(move(v) for v in x)
        if callable(getattr(x, "to", None)) and not isinstance(x, str | bytes):
            return x.to(device)
        return x

    return move(batch)


# --------------------------------------------------------------------------------------------------
# Distributed data parallel (torchrun)
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DDPInfo:
    """Where this process sits in a data-parallel job (``world_size == 1`` when not distributed)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None


def ddp_setup(*, backend: str | None = None, timeout_s: float = 120.0) -> DDPInfo:
    """Join the process group described by ``torchrun``'s environment variables.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. The backend
    defaults to ``nccl`` when CUDA is available (each process then uses GPU ``LOCAL_RANK``) and
    ``gloo`` on CPU. Run outside ``torchrun`` (no ``RANK`` in the environment), it initializes
    nothing and returns ``world_size=1``, so the same script runs as a single process.
    """
    if "RANK" not in os.environ:
        return DDPInfo(rank=0, world_size=1, local_rank=0, device=get_device(), backend=None)
    missing = [v for v in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"RANK is set but {', '.join(missing)} is not: start the script with "
            "`torchrun --nproc_per_node=N script.py` (or set all of RANK, WORLD_SIZE, LOCAL_RANK, "
            "MASTER_ADDR, MASTER_PORT)."
        )
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = torch.cuda.is_available() and backend in (None, "nccl")
    backend = backend or ("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        from datetime import timedelta

        dist.init_process_group(
            backend=backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
        )
    return DDPInfo(
        rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=backend
    )


def ddp_cleanup() -> None:
    """Leave the process group (safe to call when none was joined)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """True on rank 0, and in any non-distributed run: the process that prints and saves."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def wrap_ddp(model: nn.Module, **ddp_kwargs: Any) -> nn.Module:
    """Wrap ``model`` in `DistributedDataParallel` if a process group is up; else return it as is.

    The model should already be on this process's device. DDP broadcasts rank 0's parameters at
    construction and averages gradients across ranks during ``backward()``.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return model
    params = list(model.parameters())
    if params and params[0].device.type == "cuda":
        ddp_kwargs.setdefault("device_ids", [params[0].device.index])
    return nn.parallel.DistributedDataParallel(model, **ddp_kwargs)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside a DDP (or ``torch.compile``) wrapper, for saving and inspecting."""
    while isinstance(model, nn.parallel.DistributedDataParallel) or hasattr(model, "_orig_mod"):
        model = model.module if hasattr(model, "module") else model._orig_mod
    return model


def distributed_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    **loader_kwargs: Any,
) -> DataLoader:
    """A `DataLoader` that gives each rank a disjoint shard of ``dataset`` (a `DistributedSampler`).

    ``batch_size`` is per process. Without a process group it is an ordinary loader. Call
    ``loader.sampler.set_epoch(epoch)`` each epoch to reshuffle (`course_lib.train.fit` does).
    """
    if dist.is_available() and dist.is_initialized():
        sampler = DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
        return DataLoader(
            dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_kwargs
        )
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, **loader_kwargs
    )


def all_reduce_mean(value: torch.Tensor | float) -> torch.Tensor:
    """Average a scalar or tensor over all ranks (identity without a process group)."""
    tensor = torch.as_tensor(value, dtype=torch.float64 if isinstance(value, float) else None)
    if not (dist.is_available() and dist.is_initialized()):
        return tensor
    tensor = tensor.clone()
    if dist.get_backend() == "nccl":
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor / dist.get_world_size()
